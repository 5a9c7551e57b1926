package server

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/config"
)

// TestReloadIsAtomic: lists, settings and static answers change in one
// store. Policy A answers svc.test with 8.8.8.8; policy B answers 10.1.2.3
// and sets allow_local_binding. Both allow svc.test; A's settings with B's
// answer would be not_allowed_local, so a request that ever sees that is a
// torn reload.
func TestReloadIsAtomic(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("NETPROXY_HOME", dir)
	head := "[listen]\nhttp = \"127.0.0.1:0\"\nsocks5 = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[control]\nsocket = \"" + filepath.Join(dir, "c.sock") + "\"\n[approvals]\nenabled = false\n"
	a := head + "[network.domains]\n\"svc.test\" = \"allow\"\n[dns.hosts]\n\"svc.test\" = [\"8.8.8.8\"]\n"
	b := head + "[network]\nallow_local_binding = true\n[network.domains]\n\"svc.test\" = \"allow\"\n[dns.hosts]\n\"svc.test\" = [\"10.1.2.3\"]\n"
	path := filepath.Join(dir, "netproxy.toml")
	os.WriteFile(path, []byte(a), 0o644)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var torn atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				d := s.Engine().Evaluate(context.Background(), hostpolicy.Request{Host: "svc.test", Port: 80, Protocol: hostpolicy.ProtoHTTP, Method: "GET"})
				if !d.Allowed() {
					torn.Add(1)
				}
			}
		}()
	}
	for i := 0; i < 200; i++ {
		next := b
		if i%2 == 1 {
			next = a
		}
		os.WriteFile(path, []byte(next), 0o644)
		if err := s.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if n := torn.Load(); n != 0 {
		t.Fatalf("%d requests saw one policy's lists with another's answers", n)
	}
}
