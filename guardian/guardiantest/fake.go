// Package guardiantest provides a fake OpenAI-compatible chat-completions
// endpoint for tests and for `netproxy guardian eval` in CI. It answers by
// fixed rules (rules.go) instead of a model, and it checks every request it
// receives against the Guardian prompt contract: the fixed system prompt,
// the fixed user-message lines, and one escaped JSON object inside the data
// block. A request that breaks the contract is recorded as a violation and
// answered with HTTP 400 (so the review denies).
//
// It must never be used as a reviewer outside tests and evaluation.
package guardiantest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/netproxy/netproxy/guardian"
)

// Data is the data block's object as the fake decodes it (unknown keys are
// a contract violation).
type Data struct {
	Kind               string   `json:"kind"`
	Host               string   `json:"host"`
	Port               uint16   `json:"port"`
	Protocol           string   `json:"protocol"`
	Target             string   `json:"target"`
	Command            []string `json:"command"`
	Cwd                string   `json:"cwd"`
	SandboxPermissions string   `json:"sandbox_permissions"`
	Reason             string   `json:"reason"`
	Justification      string   `json:"justification"`
	SessionID          string   `json:"session_id"`
	EnvironmentID      string   `json:"environment_id"`
	ExecutionID        string   `json:"execution_id"`
	Truncated          []string `json:"truncated"`
}

// Call is one request the fake received.
type Call struct {
	Body    []byte // the exact HTTP request body
	System  string // the system message
	User    string // the user message
	DataRaw string // the data block's JSON line
	Data    Data
	Reply   string // the assistant content answered ("" on a fault)
}

// Server is the fake endpoint. Use URL+"/v1" as the Guardian base URL.
type Server struct {
	*httptest.Server
	mu         sync.Mutex
	calls      []Call
	violations []string
}

// New starts a fake endpoint; Close it when done.
func New() *Server {
	s := &Server{}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Calls returns every well-formed request received so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Violations returns the contract violations seen so far.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

type chatBody struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Temperature    float64           `json:"temperature"`
	ResponseFormat map[string]string `json:"response_format"`
}

func (s *Server) violation(w http.ResponseWriter, body []byte, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.violations = append(s.violations, msg+"\nbody: "+string(body))
	s.mu.Unlock()
	http.Error(w, "contract violation: "+msg, http.StatusBadRequest)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read", 400)
		return
	}
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		s.violation(w, body, "%s %s is not POST …/chat/completions", r.Method, r.URL.Path)
		return
	}
	call, err := CheckBody(body)
	if err != nil {
		s.violation(w, body, "%v", err)
		return
	}
	content, fault := Decide(call.Data)
	switch fault {
	case FaultSlow:
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		return
	case FaultHTTP500:
		http.Error(w, `{"decision":"allow_once"}`, http.StatusInternalServerError)
		return
	}
	call.Reply = content
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "fake", "object": "chat.completion", "model": "fake-rules",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": content}}},
		"usage": map[string]int{
			"prompt_tokens":     (len(call.System) + len(call.User) + 3) / 4,
			"completion_tokens": (len(content) + 3) / 4,
			"total_tokens":      (len(call.System)+len(call.User)+3)/4 + (len(content)+3)/4,
		},
	})
}

// CheckBody checks a chat-completions request body against the Guardian
// prompt contract and returns the decoded call: exactly a system and a user
// message; the system message is guardian.SystemPrompt; the user message is
// exactly five lines — an intro for the kind, the opening delimiter, one
// JSON object, the closing delimiter, the fixed tail; the JSON line holds no
// '<', '>', control, format or line-separator character (they must be
// escaped) and decodes with known keys only.
func CheckBody(body []byte) (Call, error) {
	var cb chatBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cb); err != nil {
		return Call{}, fmt.Errorf("body is not a chat request: %v", err)
	}
	if len(cb.Messages) != 2 || cb.Messages[0].Role != "system" || cb.Messages[1].Role != "user" {
		return Call{}, fmt.Errorf("want exactly [system, user] messages")
	}
	if cb.Temperature != 0 || cb.ResponseFormat["type"] != "json_object" || cb.Model == "" {
		return Call{}, fmt.Errorf("want temperature 0, response_format json_object and a model")
	}
	call := Call{Body: body, System: cb.Messages[0].Content, User: cb.Messages[1].Content}
	if call.System != guardian.SystemPrompt {
		return Call{}, fmt.Errorf("system message differs from guardian.SystemPrompt")
	}
	lines := strings.Split(call.User, "\n")
	if len(lines) != 5 {
		return Call{}, fmt.Errorf("user message has %d lines, want 5 (untrusted text broke out of the data block?)", len(lines))
	}
	if lines[1] != guardian.DataOpen || lines[3] != guardian.DataClose || lines[4] != guardian.PromptTail {
		return Call{}, fmt.Errorf("user message lines differ from the fixed template")
	}
	call.DataRaw = lines[2]
	for _, r := range call.DataRaw {
		if r == '<' || r == '>' || unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Co) {
			return Call{}, fmt.Errorf("data block holds an unescaped %U", r)
		}
	}
	dd := json.NewDecoder(strings.NewReader(call.DataRaw))
	dd.DisallowUnknownFields()
	if err := dd.Decode(&call.Data); err != nil {
		return Call{}, fmt.Errorf("data block is not the request object: %v", err)
	}
	if dd.More() {
		return Call{}, fmt.Errorf("data block holds more than one object")
	}
	if lines[0] != guardian.PromptIntro(call.Data.Kind) {
		return Call{}, fmt.Errorf("intro line %q is not the fixed one for kind %q", lines[0], call.Data.Kind)
	}
	return call, nil
}
