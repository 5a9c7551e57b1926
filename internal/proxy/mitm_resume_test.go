package proxy

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"testing"
)

// TestInterceptionResumesTLS: a second intercepted connection to the same
// host resumes TLS on both sides — the client's session with the proxy
// (one ticket key for every tunnel) and the proxy's with the upstream (one
// session cache) — and still carries the credential.
func TestInterceptionResumesTLS(t *testing.T) {
	cb := newCredBench(t)
	sessions := tls.NewLRUClientSessionCache(8)
	for i := 0; i < 3; i++ {
		c := cb.clientWith(false, false, sessions)
		var clientResumed bool
		trace := &httptrace.ClientTrace{TLSHandshakeDone: func(cs tls.ConnectionState, _ error) { clientResumed = cs.DidResume }}
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://up.test:%s/", cb.port), nil)
		req.Header.Set("Authorization", "Bearer "+cb.placeholder)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.CloseIdleConnections()
		cb.mu.Lock()
		upResumed, auth := cb.lastResumed, cb.lastAuth
		cb.mu.Unlock()
		if resp.StatusCode != 200 || auth != "Bearer "+benchSecret {
			t.Fatalf("connection %d: %d, upstream saw %q", i, resp.StatusCode, auth)
		}
		if i > 0 && (!clientResumed || !upResumed) {
			t.Fatalf("connection %d: client session resumed %v, upstream session resumed %v; want both", i, clientResumed, upResumed)
		}
	}
}
