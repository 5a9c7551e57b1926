// Package benchproc starts-and-stops helpers for the load harnesses that
// run the built netproxy binary (make bench, make bench-peers, make soak):
// waiting for its admin listener to report healthy, and stopping it the way
// an operator does. It is never part of the product.
package benchproc

import (
	"errors"
	"net/http"
	"os/exec"
	"syscall"
	"time"
)

// WaitHealthy polls http://admin/healthz until it answers 200 or within
// has passed.
func WaitHealthy(admin string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get("http://" + admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("netproxy did not become healthy")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop sends SIGTERM (netproxy drains and exits) and kills the process if
// it has not exited after grace. cmd must have been started.
func Stop(cmd *exec.Cmd, grace time.Duration) {
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		cmd.Process.Kill()
		<-done
	}
}
