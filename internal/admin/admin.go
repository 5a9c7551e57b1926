// Package admin owns the admin HTTP listener's routing and its bearer-token
// guard (SPEC §7.3): public routes (/healthz, /readyz, /metrics, the UI) and
// /api/* routes that answer 401 without the right "Authorization: Bearer";
// and, before either, the Host check that answers 421 to any request whose
// Host header is not a loopback literal, localhost or a name in
// admin.allowed_hosts (DNS rebinding).
//
// It must never log or echo the token or a Host header, never serve an
// /api/* route without checking the token, and never serve any route to a
// Host it does not allow.
package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync"
)

// Server routes admin requests. Register every route before serving.
type Server struct {
	tokenSum [32]byte
	hasToken bool
	hosts    hostAllow

	mu      sync.RWMutex
	pub     *http.ServeMux
	api     *http.ServeMux
	session SessionAuth
}

// SessionAuth is a second way into /api/* for requests that carry no
// Authorization header: the web UI's session cookie with its CSRF checks
// (package webui). It returns 0 to let r through, else the status (401 or
// 403) and a message to answer.
type SessionAuth func(r *http.Request) (status int, msg string)

// SetSessionAuth installs the cookie check; nil removes it.
func (s *Server) SetSessionAuth(f SessionAuth) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.session = f
}

// Option configures New.
type Option func(*Server)

// AllowedHosts adds names (admin.allowed_hosts) that a request's Host header
// may carry besides loopback literals and localhost. Entries that are not a
// host name or an IP address (config validation reports them) never match.
func AllowedHosts(names []string) Option {
	return func(s *Server) { s.hosts = newHostAllow(names) }
}

// New returns an admin router whose /api/* routes require token. An empty
// token locks /api/* entirely (every request answers 401).
func New(token string, opts ...Option) *Server {
	s := &Server{pub: http.NewServeMux(), api: http.NewServeMux(), hosts: newHostAllow(nil)}
	for _, o := range opts {
		o(s)
	}
	if token != "" {
		s.tokenSum = sha256.Sum256([]byte(token))
		s.hasToken = true
	}
	return s
}

// Handle registers a public route (no token). Patterns follow http.ServeMux
// ("GET /healthz").
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pub.Handle(pattern, h)
}

// HandleAPI registers a bearer-protected route; its path must start with /api/.
func (s *Server) HandleAPI(pattern string, h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.api.Handle(pattern, h)
}

// Authorized reports whether r carries the admin bearer token. Comparison
// is on SHA-256 digests in constant time.
func (s *Server) Authorized(r *http.Request) bool {
	if !s.hasToken {
		return false
	}
	auth := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(auth) <= len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(auth[len(prefix):])))
	return subtle.ConstantTimeCompare(got[:], s.tokenSum[:]) == 1
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.hosts.allowed(r.Host) {
		misdirected(w)
		return
	}
	s.mu.RLock()
	pub, api, session := s.pub, s.api, s.session
	s.mu.RUnlock()
	if r.URL.Path == "/api" || strings.HasPrefix(r.URL.Path, "/api/") {
		if !s.Authorized(r) && session != nil && r.Header.Get("Authorization") == "" {
			if status, msg := session(r); status != 0 {
				if status == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", `Bearer realm="netproxy"`)
				}
				http.Error(w, msg, status)
				return
			}
			api.ServeHTTP(w, r)
			return
		}
		if !s.Authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="netproxy"`)
			http.Error(w, "unauthorized: send Authorization: Bearer <token from admin.token_env>", http.StatusUnauthorized)
			return
		}
		api.ServeHTTP(w, r)
		return
	}
	pub.ServeHTTP(w, r)
}
