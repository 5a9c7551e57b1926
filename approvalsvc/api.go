package approvalsvc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// APIPatterns are the admin paths APIHandler serves; mount each behind the
// bearer token (admin.HandleAPI).
var APIPatterns = []string{"/api/approvals", "/api/approvals/", "/api/blocked"}

// maxBodyBytes bounds request bodies of the admin and control endpoints.
const maxBodyBytes = 1 << 20

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// decodeBody reads one JSON object, rejecting unknown fields and trailing data.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %v", err)
	}
	if dec.More() {
		return errors.New("request body: trailing data after the JSON object")
	}
	return nil
}

// APIHandler serves the admin approval endpoints of SPEC §7.3:
//
//	GET  /api/approvals[?status=pending|decided]  → {"approvals":[...]}
//	GET  /api/approvals/{id}                      → one approval
//	POST /api/approvals/{id}/decision {"decision":..., "host"?:...}
//	GET  /api/blocked                             → {"blocked":[...]}
//
// Authentication is the caller's job (mount behind the bearer token).
func (s *Service) APIHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/approvals", s.handleList)
	mux.HandleFunc("GET /api/approvals/{id}", s.handleShow)
	mux.HandleFunc("POST /api/approvals/{id}/decision", s.handleDecision)
	mux.HandleFunc("GET /api/blocked", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"blocked": s.BlockedRequests()})
	})
	return mux
}

// Approvals lists approvals by status ("" for all): pending oldest first,
// then decided newest first.
func (s *Service) Approvals(status string) []Approval { return s.list(status) }

func (s *Service) handleList(w http.ResponseWriter, r *http.Request) {
	status := r.URL.Query().Get("status")
	switch status {
	case "", "all":
		status = ""
	case StatusPending, StatusDecided:
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("status %q: want pending, decided or all", status))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": s.list(status)})
}

// list is queue.list plus, in cluster mode, the reviews pending on other
// replicas.
func (s *Service) list(status string) []Approval {
	out := s.queue.list(status)
	if s.coord == nil || status == StatusDecided {
		return out
	}
	return s.clusterPending(out)
}

func (s *Service) handleShow(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	for _, a := range s.list("") {
		if a.ID == id {
			writeJSON(w, http.StatusOK, a)
			return
		}
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("no approval with id %q", id))
}

// decisionBody is the body of POST /api/approvals/{id}/decision.
type decisionBody struct {
	Decision string `json:"decision"`
	// Host optionally names the host an allow_always/deny_always amendment
	// writes; it must equal the reviewed host.
	Host string `json:"host,omitempty"`
}

func (s *Service) handleDecision(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body decisionBody
	if err := decodeBody(r, &body); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	err := s.DecideApproval(id, strings.TrimSpace(body.Decision), body.Host)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, map[string]string{"id": id, "status": StatusDecided, "decision": strings.TrimSpace(body.Decision)})
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	default:
		writeError(w, http.StatusBadRequest, err.Error())
	}
}

// ControlHandler serves POST /v1/approvals on the control socket: an exec
// approval request that blocks until decided (see docs/approvals.md).
func (s *Service) ControlHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "use POST")
			return
		}
		var req ExecRequest
		if err := decodeBody(r, &req); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		resp, err := s.DecideExec(r.Context(), req)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, resp)
	})
}
