// Package netctl is execwrap's client of netproxy's control API (SPEC §4.2)
// over its unix socket: register and unregister an execution, follow its
// NDJSON event stream, and request an exec approval.
//
// It must never log or return the token anywhere but to its caller, and it
// never sends the token back to netproxy except as part of a frame (which is
// the bridge's job, not this package's).
package netctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/metrics/execreport"
)

// DefaultSocket is $NETPROXY_HOME/control.sock, $NETPROXY_HOME defaulting to
// ~/.netproxy (SPEC §4.2).
func DefaultSocket() string {
	home := os.Getenv("NETPROXY_HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			h = "/"
		}
		home = filepath.Join(h, ".netproxy")
	}
	return filepath.Join(home, "control.sock")
}

// Client talks to one control socket.
type Client struct {
	socket string
	hc     *http.Client
}

// New returns a client of the control socket at path.
func New(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableCompression: true,
		MaxIdleConns:       4,
	}
	return &Client{socket: path, hc: &http.Client{Transport: tr}}
}

// Socket is the path this client dials.
func (c *Client) Socket() string { return c.socket }

// Registration is the answer to POST /v1/executions.
type Registration struct {
	// Placeholders and CACert come from the credential broker
	// (docs/credentials.md); both empty without [[credentials]].
	attribution.Credentials

	ExecutionID string `json:"execution_id"`
	Token       string `json:"token"`
	HTTPProxy   string `json:"http_proxy"`
	SOCKS5Proxy string `json:"socks5_proxy"`
	// NetworkNotes say what in the execution's network policy has no
	// effect (a narrower policy can only narrow).
	NetworkNotes []string `json:"network_notes,omitempty"`
}

// Register creates an execution; the returned token must stay in the caller.
func (c *Client) Register(ctx context.Context, spec attribution.ExecutionSpec) (Registration, error) {
	var r Registration
	if err := c.do(ctx, http.MethodPost, "/v1/executions", spec, http.StatusCreated, &r); err != nil {
		return Registration{}, err
	}
	if r.ExecutionID == "" || r.Token == "" || r.HTTPProxy == "" {
		return Registration{}, fmt.Errorf("netproxy control %s: registration answer lacks execution_id, token or http_proxy", c.socket)
	}
	return r, nil
}

// Unregister ends the execution (its token is revoked at once).
func (c *Client) Unregister(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/executions/"+url.PathEscape(id), nil, http.StatusNoContent, nil)
}

// Events opens the execution's NDJSON event stream. When it returns, the
// subscription is active (the server answered), so no later event is lost.
// The channel closes when the stream ends (execution_ended, EOF or ctx).
func (c *Client) Events(ctx context.Context, id string) (<-chan attribution.Event, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://netproxy/v1/executions/"+url.PathEscape(id)+"/events", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.wrap(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, c.statusErr("GET events", resp)
	}
	ch := make(chan attribution.Event, 64)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			var ev attribution.Event
			if json.Unmarshal(line, &ev) != nil {
				continue // a line we cannot read is skipped, not fatal
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
			if ev.Type == attribution.EventExecutionEnded {
				return
			}
		}
	}()
	return ch, nil
}

// ApprovalRequest is the exec approval asked of netproxy (POST /v1/approvals,
// approvalsvc.ExecRequest; SPEC §6.4): the approval identity, why, and what
// would be remembered.
type ApprovalRequest struct {
	SessionID          string   `json:"session_id"`
	EnvironmentID      string   `json:"environment_id"`
	ExecutionID        string   `json:"execution_id,omitempty"`
	Command            []string `json:"command"`
	Shell              []string `json:"shell,omitempty"` // the shell and flag that run a script (part of the cache key)
	Cwd                string   `json:"cwd"`
	SandboxPermissions string   `json:"sandbox_permissions,omitempty"`
	TTY                *bool    `json:"tty,omitempty"`
	Reason             string   `json:"reason,omitempty"`
	Justification      string   `json:"justification,omitempty"`
	ProposedAmendment  []string `json:"proposed_amendment,omitempty"`
	ApprovalPolicy     string   `json:"approval_policy,omitempty"`
}

// ApprovalAnswer is the decided approval (approvalsvc.ExecResponse).
type ApprovalAnswer struct {
	ID        string `json:"id"`
	Decision  string `json:"decision"` // allow_once | allow_session | allow_always | deny | deny_always | abort | timeout | error
	Approved  bool   `json:"approved"` // true exactly for the allow_* decisions
	Reviewer  string `json:"reviewer,omitempty"`
	Rationale string `json:"rationale,omitempty"`
}

// RequestApproval blocks until the approval is decided (or ctx ends).
func (c *Client) RequestApproval(ctx context.Context, req ApprovalRequest) (ApprovalAnswer, error) {
	var a ApprovalAnswer
	if err := c.do(ctx, http.MethodPost, "/v1/approvals", req, 0, &a); err != nil {
		return ApprovalAnswer{}, err
	}
	if a.Decision == "" {
		return ApprovalAnswer{}, fmt.Errorf("netproxy control %s: approval answer has no decision", c.socket)
	}
	return a, nil
}

// ReportExecDecision tells netproxy about one exec-policy decision; it is
// counted in netproxy_exec_decisions_total and audited as exec_decision.
// Callers treat an error as "not recorded" and carry on.
func (c *Client) ReportExecDecision(ctx context.Context, r execreport.Report) error {
	return c.do(ctx, http.MethodPost, execreport.URLPath, r, http.StatusNoContent, nil)
}

// do sends one JSON request; want 0 accepts any 2xx.
func (c *Client) do(ctx context.Context, method, path string, in any, want int, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://netproxy"+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.wrap(err)
	}
	defer resp.Body.Close()
	ok := resp.StatusCode == want || (want == 0 && resp.StatusCode/100 == 2)
	if !ok {
		return c.statusErr(method+" "+path, resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return fmt.Errorf("netproxy control %s: %s %s: bad JSON answer: %w", c.socket, method, path, err)
	}
	return nil
}

func (c *Client) wrap(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("netproxy control socket %s unreachable (%v); start `netproxy serve`, pass --control SOCKET, or use --network none", c.socket, err)
}

func (c *Client) statusErr(what string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var e struct {
		Error string `json:"error"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	return &StatusError{Socket: c.socket, What: what, Status: resp.StatusCode, Message: msg}
}

// StatusError is a non-success answer of the control API.
type StatusError struct {
	Socket, What string
	Status       int
	Message      string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("netproxy control %s: %s: HTTP %d: %s", e.Socket, e.What, e.Status, e.Message)
}

// Timeout for control calls that should be quick (register, unregister).
const QuickTimeout = 5 * time.Second

// Ping checks that the control socket answers.
func (c *Client) Ping(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/v1/executions", nil, http.StatusOK, nil)
}
