package server

// The control API of the narrower network policies (the pipeline's scopes
// stage, hostpolicy.Scopes): an execution's policy compiled from its
// registration, and PUT/GET/DELETE /v1/sessions/{id}/network.

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/hostpolicy"
)

// maxPolicyBody bounds a narrower policy's request body.
const maxPolicyBody = 1 << 20

// maxSessionID bounds a session id in a path.
const maxSessionID = 256

// scopeAPI serves the narrower policies of one engine's pipeline.
type scopeAPI struct {
	engine *hostpolicy.Engine
	scopes *hostpolicy.Scopes
}

// specOf maps the control API's policy onto hostpolicy's.
func specOf(p attribution.NetworkPolicy) hostpolicy.ScopeSpec {
	return hostpolicy.ScopeSpec{Allow: p.Allow, Deny: p.Deny, Mode: p.Mode}
}

// denyAll is a scope that blocks everything: what an execution whose
// policy cannot be compiled gets (fail closed).
func denyAll(level string) *hostpolicy.Scope {
	sc, err := hostpolicy.BuildScope(level, hostpolicy.ScopeSpec{Allow: []string{"invalid.invalid"}})
	if err != nil {
		panic("server: deny-all scope: " + err.Error())
	}
	return sc
}

// executionChanged is the registry hook: a started execution's policy is
// compiled before its token is returned, an ended one's dropped.
func (a scopeAPI) executionChanged(kind string, e attribution.Execution) {
	switch kind {
	case attribution.ExecutionStarted:
		if e.Network == nil {
			return
		}
		sc, err := hostpolicy.BuildScope(hostpolicy.LevelExecution, specOf(*e.Network))
		if err != nil {
			// Validated at registration; if it still fails, fail closed.
			sc = denyAll(hostpolicy.LevelExecution)
		}
		a.scopes.SetExecution(e.ID, sc)
	case attribution.ExecutionEnded:
		a.scopes.SetExecution(e.ID, nil)
	}
}

// checkExecution validates an execution's narrower policy (the control
// API's registration hook) and returns what in it has no effect.
func (a scopeAPI) checkExecution(p attribution.NetworkPolicy) ([]string, error) {
	spec := specOf(p)
	if _, err := hostpolicy.BuildScope(hostpolicy.LevelExecution, spec); err != nil {
		return nil, err
	}
	return a.engine.Snapshot().Notes(spec), nil
}

// sessionAnswer is the answer of the session policy routes.
type sessionAnswer struct {
	SessionID string                     `json:"session_id"`
	Network   *attribution.NetworkPolicy `json:"network"`
	Notes     []string                   `json:"notes,omitempty"`
}

// sessionNetwork serves PUT, GET and DELETE /v1/sessions/{id}/network on
// the control socket. PUT replaces the session's policy (every request of
// the session must pass it, from now on and on open connections, which
// are re-checked); DELETE removes it.
func (a scopeAPI) sessionNetwork() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if id == "" || len(id) > maxSessionID || strings.ContainsAny(id, "\x00\r\n") {
			writeError(w, http.StatusBadRequest, "session id: must be 1–256 characters")
			return
		}
		switch r.Method {
		case http.MethodGet:
			sc, ok := a.scopes.Session(id)
			if !ok {
				writeError(w, http.StatusNotFound, "no network policy for this session")
				return
			}
			spec := sc.Spec()
			writeJSON(w, http.StatusOK, sessionAnswer{SessionID: id, Network: &attribution.NetworkPolicy{Allow: spec.Allow, Deny: spec.Deny, Mode: spec.Mode}})
		case http.MethodDelete:
			if _, ok := a.scopes.Session(id); !ok {
				writeError(w, http.StatusNotFound, "no network policy for this session")
				return
			}
			a.scopes.SetSession(id, nil)
			w.WriteHeader(http.StatusNoContent)
		case http.MethodPut:
			var p attribution.NetworkPolicy
			dec := json.NewDecoder(io.LimitReader(r.Body, maxPolicyBody))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&p); err != nil {
				writeError(w, http.StatusBadRequest, `request body must be a JSON object {"allow":[...],"deny":[...],"mode":"limited"}: `+err.Error())
				return
			}
			if dec.More() {
				writeError(w, http.StatusBadRequest, "request body must hold one JSON object")
				return
			}
			spec := specOf(p)
			sc, err := hostpolicy.BuildScope(hostpolicy.LevelSession, spec)
			if err != nil {
				writeError(w, http.StatusBadRequest, "network: "+strings.ReplaceAll(err.Error(), "\n", "; "))
				return
			}
			notes := a.engine.Snapshot().Notes(spec)
			a.scopes.SetSession(id, sc)
			writeJSON(w, http.StatusOK, sessionAnswer{SessionID: id, Network: &p, Notes: notes})
		default:
			w.Header().Set("Allow", "GET, PUT, DELETE")
			writeError(w, http.StatusMethodNotAllowed, "use GET, PUT or DELETE")
		}
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
