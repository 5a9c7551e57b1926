// Package guardian owns the automated reviewer of approval requests (SPEC §5):
// one Reviewer interface and three backends — a Starlark script, an HTTP
// webhook and an OpenAI-compatible chat-completions endpoint — plus the
// deterministic pre-screen that runs before any of them, the length caps and
// escaping of the agent-controlled fields they see, and the strict parsing of
// their verdicts (docs/guardian.md has the threat model).
//
// It must never turn an error, a timeout or an unparsable answer into an
// allow: every such path returns an error, which the approval service records
// as a denial. It never answers allow_always or deny_always (amendments stay
// with humans), never puts agent-controlled text into a prompt outside the
// escaped data block, never sends or logs a proxy token or an admin token,
// and it dials its endpoints directly (never through the proxy or *_PROXY
// variables).
package guardian

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Decision values of a Verdict. A Guardian can approve one request or the
// same request for the rest of the session; it can never amend the policy
// (allow_always / deny_always are a human's).
const (
	DecisionAllowOnce    = "allow_once"
	DecisionAllowSession = "allow_session"
	DecisionDeny         = "deny"
	// DecisionAllow is accepted from backends as a synonym of allow_once
	// (the answer format before allow_session existed).
	DecisionAllow = "allow"
)

// Risk values of a Verdict.
const (
	RiskLow    = "low"
	RiskMedium = "medium"
	RiskHigh   = "high"
)

// ReviewRequest is what the reviewer judges: a network access or an exec
// approval request together with the execution that triggered it.
type ReviewRequest struct {
	ID   string `json:"id"`
	Kind string `json:"kind"` // "network" | "exec"

	SessionID     string `json:"session_id"`
	EnvironmentID string `json:"environment_id"`
	ExecutionID   string `json:"execution_id,omitempty"`

	// Network requests.
	Host     string `json:"host,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	Port     uint16 `json:"port,omitempty"`
	Target   string `json:"target,omitempty"` // e.g. "https://example.com:443"
	// Method and Path (without query): a request an ask request rule sent
	// to review (SPEC §3.10).
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`

	// The execution's (or exec request's) command and working directory.
	Command            []string `json:"command,omitempty"`
	Cwd                string   `json:"cwd,omitempty"`
	SandboxPermissions string   `json:"sandbox_permissions,omitempty"`

	Reason        string `json:"reason,omitempty"`
	Justification string `json:"justification,omitempty"`
}

// Verdict is a reviewer's answer.
type Verdict struct {
	Decision  string `json:"decision"` // allow_once | allow_session | deny
	Rationale string `json:"rationale,omitempty"`
	Risk      string `json:"risk,omitempty"` // "" | low | medium | high

	// Set by this package, never read from a backend's answer:
	// Screened is true when the pre-screen decided and no backend was asked;
	// Finding says which field and rule. Usage is the token count the backend
	// reported (zero when it reports none).
	Screened bool    `json:"-"`
	Finding  Finding `json:"-"`
	Usage    Usage   `json:"-"`
}

// Usage is the token count a chat-completions backend reported for a review.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
}

// Allowed reports whether the verdict lets the request proceed: allow_once
// or allow_session (or the legacy "allow"). Anything else — including
// allow_always from a reviewer that bypassed the parser — is not an allow.
func (v Verdict) Allowed() bool {
	switch v.Decision {
	case DecisionAllowOnce, DecisionAllowSession, DecisionAllow:
		return true
	}
	return false
}

// Reviewer judges one request. An error means "no verdict": callers deny.
// Implementations must honour ctx (timeouts and aborts).
type Reviewer interface {
	Review(ctx context.Context, req ReviewRequest) (Verdict, error)
}

// DefaultTimeout bounds one review when the config gives none.
const DefaultTimeout = 10 * time.Second

// Deps are what a Guardian reports to: the pre-screen counter and the
// logger. Both may be nil.
type Deps struct {
	Prescreen PrescreenCounter
	Logger    *slog.Logger
}

// Settings choose and configure a backend ([guardian] in the config file,
// mapped by internal/config). Error messages name the TOML keys.
type Settings struct {
	Backend   string // "starlark" | "webhook" | "openai"
	Script    string // starlark: the .star file (relative to baseDir)
	URL       string // webhook URL or OpenAI-compatible base URL
	Model     string // openai
	APIKeyEnv string // openai: the variable holding the key
	Timeout   time.Duration
}

// New builds the reviewer named by cfg.Backend behind the pre-screen (every
// request is screened before the backend sees it). baseDir resolves a
// relative script path (the config file's folder); getenv reads the API key
// variable. A misconfigured backend is an error naming the key to fix.
func New(cfg Settings, baseDir string, getenv func(string) string, deps Deps) (Reviewer, error) {
	backend, err := NewBackend(cfg, baseDir, getenv)
	if err != nil {
		return nil, err
	}
	return WithPrescreen(backend, deps), nil
}

// NewBackend builds the backend named by cfg.Backend without the pre-screen
// (the evaluation harness wraps it itself).
func NewBackend(cfg Settings, baseDir string, getenv func(string) string) (Reviewer, error) {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	switch cfg.Backend {
	case "starlark":
		if cfg.Script == "" {
			return nil, fmt.Errorf("guardian.script: required for backend \"starlark\"; set it to a .star file defining review(request)")
		}
		path := cfg.Script
		if !filepath.IsAbs(path) && baseDir != "" {
			path = filepath.Join(baseDir, path)
		}
		return NewStarlark(path, StarlarkOptions{Timeout: timeout})
	case "webhook":
		if cfg.URL == "" {
			return nil, fmt.Errorf("guardian.url: required for backend \"webhook\"; set it to the http(s) URL that receives the JSON review request")
		}
		return NewWebhook(cfg.URL, WebhookOptions{Timeout: timeout})
	case "openai":
		if cfg.URL == "" {
			return nil, fmt.Errorf("guardian.url: required for backend \"openai\"; set it to the chat-completions base URL (e.g. https://api.openai.com/v1)")
		}
		if cfg.Model == "" {
			return nil, fmt.Errorf("guardian.model: required for backend \"openai\"")
		}
		key := ""
		if cfg.APIKeyEnv != "" {
			key = getenv(cfg.APIKeyEnv)
			if key == "" {
				return nil, fmt.Errorf("guardian.api_key_env: environment variable %s is empty or unset; export the API key in it", cfg.APIKeyEnv)
			}
		}
		return NewOpenAI(OpenAIOptions{BaseURL: cfg.URL, Model: cfg.Model, APIKey: key, Timeout: timeout})
	case "":
		return nil, fmt.Errorf("guardian.backend: required when approvals.reviewer = \"guardian\"; use \"starlark\", \"webhook\" or \"openai\"")
	default:
		return nil, fmt.Errorf("guardian.backend: unknown backend %q; use \"starlark\", \"webhook\" or \"openai\"", cfg.Backend)
	}
}

// directClient is an HTTP client that never uses proxy environment variables:
// the Guardian endpoint is dialed directly so a review never loops through
// the proxy it is reviewing for.
func directClient() *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		MaxIdleConns:          16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 0, // bounded by the request context
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: tr,
		// A reviewer endpoint that redirects is misconfigured; do not follow.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// withTimeout bounds ctx by d when d > 0.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
