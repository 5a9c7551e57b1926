package attribution

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ProxyInfo tells registering clients where the proxy listens ("host:port").
type ProxyInfo struct {
	HTTP   string
	SOCKS5 string
}

// maxControlBody bounds a control API request body.
const maxControlBody = 1 << 20

// ControlServer is the control API of SPEC §4.2, served over HTTP/1.1 on a
// unix socket that only the owner may open.
type ControlServer struct {
	reg  *Registry
	info ProxyInfo

	mu        sync.RWMutex
	approvals http.Handler
	network   NetworkCheck

	srv *http.Server
	mux *http.ServeMux

	minter Minter // under mu; credentials.go
}

// NewControlServer builds the control API. approvals serves
// POST /v1/approvals; nil answers 503 until SetApprovals is called.
func NewControlServer(reg *Registry, info ProxyInfo, approvals http.Handler) *ControlServer {
	c := &ControlServer{reg: reg, info: info, approvals: approvals, mux: http.NewServeMux()}
	c.mux.HandleFunc("POST /v1/executions", c.register)
	c.mux.HandleFunc("GET /v1/executions", c.list)
	c.mux.HandleFunc("GET /v1/executions/{id}", c.get)
	c.mux.HandleFunc("DELETE /v1/executions/{id}", c.revoke)
	c.mux.HandleFunc("GET /v1/executions/{id}/events", c.events)
	c.mux.HandleFunc("POST /v1/approvals", c.approvalsHandler)
	c.srv = &http.Server{Handler: c.mux, ReadHeaderTimeout: 10 * time.Second}
	return c
}

// SetApprovals installs the handler of POST /v1/approvals.
func (c *ControlServer) SetApprovals(h http.Handler) {
	c.mu.Lock()
	c.approvals = h
	c.mu.Unlock()
}

// NetworkCheck validates an execution's narrower network policy before it
// is registered: an error rejects the registration (400); notes say what
// in it has no effect (a narrower policy can only narrow) and are returned
// to the client.
type NetworkCheck func(p NetworkPolicy) (notes []string, err error)

// SetNetworkCheck installs the validator of the "network" object of POST
// /v1/executions. Without one, a registration that carries a network
// policy is refused (it could not be enforced).
func (c *ControlServer) SetNetworkCheck(f NetworkCheck) {
	c.mu.Lock()
	c.network = f
	c.mu.Unlock()
}

// Handle adds a route served by another part (e.g. POST /v1/exec-decisions
// from metrics). Call before Serve.
func (c *ControlServer) Handle(pattern string, h http.Handler) { c.mux.Handle(pattern, h) }

// Handler returns the API's routes (for tests and embedding).
func (c *ControlServer) Handler() http.Handler { return c.mux }

// Serve answers requests on ln until Shutdown.
func (c *ControlServer) Serve(ln net.Listener) error {
	err := c.srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops the server; open event streams end when ctx is done.
func (c *ControlServer) Shutdown(ctx context.Context) error {
	err := c.srv.Shutdown(ctx)
	if err != nil {
		c.srv.Close()
	}
	return err
}

// ListenUnix creates the unix socket at path with mode 0600. The socket is
// bound under a temporary name, restricted, then renamed into place, so it
// is never reachable with wider permissions. A stale socket at path is
// replaced; any other kind of file there is an error.
func ListenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("control.socket %s: creating its folder: %w", path, err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("control.socket %s: exists and is not a socket; remove it or choose another path", path)
		}
		if c, err := net.DialTimeout("unix", path, 500*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("control.socket %s: another process is serving it; stop it or choose another path", path)
		}
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	tmp := filepath.Join(dir, ".control-"+hex.EncodeToString(rnd[:])+".sock")
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("control.socket %s: %w", path, err)
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("control.socket %s: chmod: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("control.socket %s: %w", path, err)
	}
	return &unlinkListener{Listener: ln, path: path}, nil
}

// unlinkListener removes the socket file when closed.
type unlinkListener struct {
	net.Listener
	path string
	once sync.Once
}

func (l *unlinkListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { os.Remove(l.path) })
	return err
}

type registerResponse struct {
	Credentials // placeholders and ca_cert (credentials.go)

	ExecutionID string `json:"execution_id"`
	Token       string `json:"token"`
	HTTPProxy   string `json:"http_proxy"`
	SOCKS5Proxy string `json:"socks5_proxy"`
	// NetworkNotes say what in the execution's network policy has no
	// effect (omitted when none).
	NetworkNotes []string `json:"network_notes,omitempty"`
	// BudgetNotes say which of the execution's budgets were clamped to
	// the host-wide ones (omitted when none).
	BudgetNotes []string `json:"budget_notes,omitempty"`
}

func (c *ControlServer) register(w http.ResponseWriter, r *http.Request) {
	var spec ExecutionSpec
	dec := json.NewDecoder(io.LimitReader(r.Body, maxControlBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		writeError(w, http.StatusBadRequest, "request body must be a JSON object {session_id, environment_id, turn_id?, command, cwd?}: "+err.Error())
		return
	}
	var notes []string
	if spec.Network != nil {
		c.mu.RLock()
		check := c.network
		c.mu.RUnlock()
		if check == nil {
			writeError(w, http.StatusServiceUnavailable, "network: this proxy cannot enforce a per-execution network policy")
			return
		}
		var err error
		if notes, err = check(*spec.Network); err != nil {
			writeError(w, http.StatusBadRequest, "network: "+strings.ReplaceAll(err.Error(), "\n", "; "))
			return
		}
	}
	budgetNotes, ok := c.checkBudgets(w, spec.Budgets)
	if !ok {
		return
	}
	e, token, err := c.reg.Register(spec)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, ErrInvalidSpec) {
			status = http.StatusBadRequest
		}
		writeError(w, status, strings.ReplaceAll(err.Error(), "\n", "; "))
		return
	}
	creds, ok := c.mintCredentials(w, e.ID)
	if !ok {
		return
	}
	writeJSON(w, http.StatusCreated, registerResponse{
		ExecutionID: e.ID, Token: token, HTTPProxy: c.info.HTTP, SOCKS5Proxy: c.info.SOCKS5,
		NetworkNotes: notes, BudgetNotes: budgetNotes,
		Credentials: creds,
	})
}

func (c *ControlServer) list(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"executions": c.reg.Active()})
}

func (c *ControlServer) get(w http.ResponseWriter, r *http.Request) {
	e, ok := c.reg.Get(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, "no active execution with this id")
		return
	}
	writeJSON(w, http.StatusOK, withUsage(e))
}

func (c *ControlServer) revoke(w http.ResponseWriter, r *http.Request) {
	if !c.reg.Revoke(r.PathValue("id")) {
		writeError(w, http.StatusNotFound, "no active execution with this id")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// events streams the execution's events as NDJSON until it ends or the
// client goes away.
func (c *ControlServer) events(w http.ResponseWriter, r *http.Request) {
	ch, cancel, ok := c.reg.Subscribe(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, "no active execution with this id")
		return
	}
	defer cancel()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	enc := json.NewEncoder(w)
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, open := <-ch:
			if !open {
				return
			}
			if err := enc.Encode(ev); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			if ev.Type == EventExecutionEnded {
				return
			}
		}
	}
}

func (c *ControlServer) approvalsHandler(w http.ResponseWriter, r *http.Request) {
	c.mu.RLock()
	h := c.approvals
	c.mu.RUnlock()
	if h == nil {
		writeError(w, http.StatusServiceUnavailable, "the approval service is not enabled on this proxy")
		return
	}
	h.ServeHTTP(w, r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
