package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestBearerGuard(t *testing.T) {
	s := New("s3cret")
	s.Handle("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	s.HandleAPI("POST /api/reload", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "reloaded") }))
	srv := httptest.NewServer(s)
	defer srv.Close()

	do := func(method, path, auth string) int {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	cases := []struct {
		method, path, auth string
		want               int
	}{
		{"GET", "/healthz", "", 200},
		{"POST", "/api/reload", "", 401},
		{"POST", "/api/reload", "Bearer wrong", 401},
		{"POST", "/api/reload", "Basic s3cret", 401},
		{"POST", "/api/reload", "Bearer s3cret", 200},
		{"POST", "/api/reload", "bearer s3cret", 200},
		{"GET", "/api/unknown", "", 401},
		{"GET", "/api/unknown", "Bearer s3cret", 404},
	}
	for _, c := range cases {
		if got := do(c.method, c.path, c.auth); got != c.want {
			t.Errorf("%s %s %q: %d, want %d", c.method, c.path, c.auth, got, c.want)
		}
	}
}

func TestEmptyTokenLocksAPI(t *testing.T) {
	s := New("")
	s.HandleAPI("GET /api/x", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/api/x", nil)
	req.Host = "127.0.0.1:9091"
	req.Header.Set("Authorization", "Bearer ")
	s.ServeHTTP(rec, req)
	if rec.Code != 401 {
		t.Fatalf("empty token: %d, want 401", rec.Code)
	}
}
