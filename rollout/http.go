package rollout

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

// CheckExecution validates an execution's narrower policy (the control
// API's registration hook) and returns what in it has no effect.
func (e *Evaluator) CheckExecution(p attribution.NetworkPolicy) ([]string, error) {
	spec := SpecOf(p)
	if _, err := hostpolicy.BuildScope(hostpolicy.LevelExecution, spec); err != nil {
		return nil, err
	}
	return e.engine.Snapshot().Notes(spec), nil
}

// sessionAnswer is the answer of the session policy routes.
type sessionAnswer struct {
	SessionID string                     `json:"session_id"`
	Network   *attribution.NetworkPolicy `json:"network"`
	Notes     []string                   `json:"notes,omitempty"`
}

// SessionNetwork serves PUT, GET and DELETE /v1/sessions/{id}/network on
// the control socket. PUT replaces the session's policy (every request of
// the session must pass it, from now on and on open connections, which
// are re-checked); DELETE removes it.
func (e *Evaluator) SessionNetwork() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if id == "" || len(id) > maxSessionID || strings.ContainsAny(id, "\x00\r\n") {
			writeError(w, http.StatusBadRequest, "session id: must be 1–256 characters")
			return
		}
		switch r.Method {
		case http.MethodGet:
			sc, ok := e.scopes.Session(id)
			if !ok {
				writeError(w, http.StatusNotFound, "no network policy for this session")
				return
			}
			spec := sc.Spec()
			writeJSON(w, http.StatusOK, sessionAnswer{SessionID: id, Network: &attribution.NetworkPolicy{Allow: spec.Allow, Deny: spec.Deny, Mode: spec.Mode}})
		case http.MethodDelete:
			if _, ok := e.scopes.Session(id); !ok {
				writeError(w, http.StatusNotFound, "no network policy for this session")
				return
			}
			e.scopes.SetSession(id, nil)
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
			spec := SpecOf(p)
			sc, err := hostpolicy.BuildScope(hostpolicy.LevelSession, spec)
			if err != nil {
				writeError(w, http.StatusBadRequest, "network: "+strings.ReplaceAll(err.Error(), "\n", "; "))
				return
			}
			notes := e.engine.Snapshot().Notes(spec)
			e.scopes.SetSession(id, sc)
			writeJSON(w, http.StatusOK, sessionAnswer{SessionID: id, Network: &p, Notes: notes})
		default:
			w.Header().Set("Allow", "GET, PUT, DELETE")
			writeError(w, http.StatusMethodNotAllowed, "use GET, PUT or DELETE")
		}
	})
}

// ShadowAPI serves GET /api/shadow (admin listener, bearer token).
func (e *Evaluator) ShadowAPI() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.shadow == nil {
			writeJSON(w, http.StatusOK, Summary{Status: "off", Hosts: []HostFlips{}})
			return
		}
		writeJSON(w, http.StatusOK, e.shadow.Summary())
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
