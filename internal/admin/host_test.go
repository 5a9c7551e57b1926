package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHostCheck(t *testing.T) {
	s := New("s3cret", AllowedHosts([]string{"NetProxy.Internal.", "10.0.0.7", "fd00::7"}))
	s.Handle("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	s.HandleAPI("GET /api/x", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "x") }))
	cases := map[string]int{
		"127.0.0.1:9091": 200, "127.0.0.1": 200, "127.9.9.9:1": 200, "[::1]:9091": 200, "[::1]": 200,
		"localhost:9091": 200, "LOCALHOST": 200, "localhost.:9091": 200,
		"netproxy.internal": 200, "netproxy.internal.:80": 200, "10.0.0.7:9091": 200, "[fd00::7]:9091": 200,
		"[::ffff:127.0.0.1]:9091": 200,
		"":                        421, "evil.test": 421, "evil.test:9091": 421, "rebind.attacker.example:9091": 421,
		"localhost.evil.test": 421, "127.0.0.1.evil.test": 421, "10.0.0.8": 421, "0.0.0.0:9091": 421,
		"2130706433": 421, "127.1": 421, "[127.0.0.1]": 421, "::1": 421, "localhost:99999": 421,
		"localhost:": 421, "local host": 421, "xn--bcher-kva.example": 421, "[fe80::1%25lo]:1": 421,
		"localhost:80:80": 421, "exa%6dple": 421,
	}
	for host, want := range cases {
		for _, path := range []string{"/healthz", "/api/x", "/nothing"} {
			req := httptest.NewRequest("GET", path, nil)
			req.Host = host
			req.Header.Set("Authorization", "Bearer s3cret")
			w := httptest.NewRecorder()
			s.ServeHTTP(w, req)
			got := w.Code
			if want == 200 && path == "/nothing" {
				if got == 421 {
					t.Errorf("Host %q %s: 421, want routing (404)", host, path)
				}
				continue
			}
			if got != want {
				t.Errorf("Host %q %s: %d, want %d", host, path, got, want)
			}
			if got == 421 && strings.Contains(w.Body.String(), host) && host != "" {
				t.Errorf("421 body echoes the Host header %q", host)
			}
		}
	}
}

func TestCheckAllowedHost(t *testing.T) {
	for _, ok := range []string{"np.example", "NP.example.", "10.0.0.7", "fd00::7", "a_b.internal"} {
		if err := CheckAllowedHost(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", " np.example", "np.example:9091", "*.example", "[fd00::7]", "a b", "fe80::1%eth0", "bücher.example", "a..b"} {
		if err := CheckAllowedHost(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzHostOfHeader: the parser never panics, and what it accepts is
// canonical (parsing it again gives the same name) and holds no port.
func FuzzHostOfHeader(f *testing.F) {
	for _, s := range []string{"127.0.0.1:9091", "[::1]:80", "localhost.", "a.b.c", "[", "[::1", "x:y", "::1", "%", "A.B:0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h, err := HostOfHeader(v)
		if err != nil {
			return
		}
		if h == "" {
			t.Fatalf("%q: accepted as empty", v)
		}
		in := h
		if strings.Contains(h, ":") {
			in = "[" + h + "]"
		}
		again, err := HostOfHeader(in)
		if err != nil || again != h {
			t.Fatalf("%q → %q, reparsed %q %v", v, h, again, err)
		}
		_ = newHostAllow([]string{h}).allowed(v)
	})
}
