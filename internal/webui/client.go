package webui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/netproxy/netproxy/approvalsvc"
	"github.com/netproxy/netproxy/execcore/execpolicy"
)

// Decisions a reviewer can make (SPEC §5 step 7), spelled as approvalsvc
// spells its outcomes.
var Decisions = []string{
	approvalsvc.OutcomeAllowOnce, approvalsvc.OutcomeAllowSession, approvalsvc.OutcomeAllowAlways,
	approvalsvc.OutcomeDeny, approvalsvc.OutcomeDenyAlways,
}

// ValidDecision reports whether d is one of Decisions.
func ValidDecision(d string) bool { return slices.Contains(Decisions, d) }

// The admin API's approvals are decoded into approvalsvc.Approval, the one
// wire type the service serialises for GET /api/approvals, its SSE events
// and the page's data; the helpers below only present it.

// CommandText renders a's command for a terminal, shell-quoted.
func CommandText(a approvalsvc.Approval) string { return ShellJoin(a.Command) }

// Target is "host:port" (IPv6 bracketed), or a description for an
// approval without a host.
func Target(a approvalsvc.Approval) string {
	if a.Host == "" {
		if a.Kind == approvalsvc.KindExec {
			return "command approval"
		}
		return "(unknown host)"
	}
	h := a.Host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if a.Port != 0 {
		h = fmt.Sprintf("%s:%d", h, a.Port)
	}
	if a.Method != "" {
		// An ask request rule's review: the request under review.
		return a.Method + " " + h + a.Path
	}
	return h
}

// ProposedRule is the prefix_rule an exec approval's allow_always would
// save (its proposed amendment), or "" when none is proposed.
func ProposedRule(a approvalsvc.Approval) string {
	if len(a.ProposedAmendment) == 0 {
		return ""
	}
	return execpolicy.FormatPrefixRule(a.ProposedAmendment)
}

// Created parses a.CreatedAt; the zero time when absent or malformed.
func Created(a approvalsvc.Approval) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, a.CreatedAt)
	return t
}

// ShellJoin quotes argv for display the way a POSIX shell would read it.
func ShellJoin(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
			b.WriteString(a)
			continue
		}
		b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	return b.String()
}

// ErrUnauthorized is returned when the admin API answers 401.
var ErrUnauthorized = errors.New("admin token rejected")

// UnreachableError wraps a transport failure reaching the admin API.
type UnreachableError struct {
	URL string
	Err error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the admin API at %s: %v", e.URL, e.Err)
}
func (e *UnreachableError) Unwrap() error { return e.Err }

// StatusError is a non-2xx answer other than 401.
type StatusError struct {
	Status int
	Msg    string
}

func (e *StatusError) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("admin API answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("admin API answered %d: %s", e.Status, e.Msg)
}

// Client talks to the admin API with the bearer token.
type Client struct {
	Base  *url.URL
	token string
	http  *http.Client
}

// NewClient returns a client for the admin listener at base (e.g.
// http://127.0.0.1:9091). hc nil takes a client with no overall timeout
// (event streams are long-lived); pass contexts to bound calls.
func NewClient(base, token string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--admin %q: want a URL like http://127.0.0.1:9091", base)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("--admin %q: want scheme://host:port with no credentials, query or fragment", base)
	}
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}}
	}
	return &Client{Base: u, token: token, http: hc}, nil
}

func (c *Client) endpoint(path string) string {
	u := *c.Base
	p, q, _ := strings.Cut(path, "?")
	u.Path = strings.TrimRight(u.Path, "/") + p
	u.RawPath = ""
	u.RawQuery = q
	return u.String()
}

func (c *Client) do(ctx context.Context, method, path string, body any, accept string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint(path), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &UnreachableError{URL: c.Base.String(), Err: err}
	}
	if resp.StatusCode == http.StatusUnauthorized {
		resp.Body.Close()
		return nil, ErrUnauthorized
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var e struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &e) == nil && (e.Error != "" || e.Message != "") {
			msg = e.Error + e.Message
		}
		return nil, &StatusError{Status: resp.StatusCode, Msg: clip(msg, 300)}
	}
	return resp, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Approvals lists approvals; status "" lists whatever the server returns
// by default, "pending" only the waiting ones.
func (c *Client) Approvals(ctx context.Context, status string) ([]approvalsvc.Approval, error) {
	path := "/api/approvals"
	if status != "" {
		path += "?status=" + url.QueryEscape(status)
	}
	resp, err := c.do(ctx, http.MethodGet, path, nil, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Approvals []approvalsvc.Approval `json:"approvals"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 32<<20)).Decode(&out); err != nil {
		return nil, fmt.Errorf("decoding GET %s: %w", path, err)
	}
	return out.Approvals, nil
}

// Approval fetches one approval (pending or recently decided) by id.
func (c *Client) Approval(ctx context.Context, id string) (approvalsvc.Approval, error) {
	resp, err := c.do(ctx, http.MethodGet, "/api/approvals/"+url.PathEscape(id), nil, "application/json")
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) && se.Status == http.StatusNotFound {
			return approvalsvc.Approval{}, fmt.Errorf("no approval with id %q (see `netproxy approvals list`)", id)
		}
		return approvalsvc.Approval{}, err
	}
	defer resp.Body.Close()
	var a approvalsvc.Approval
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&a); err != nil {
		return approvalsvc.Approval{}, fmt.Errorf("decoding GET /api/approvals/%s: %w", id, err)
	}
	return a, nil
}

// Decide posts a decision for approval id.
func (c *Client) Decide(ctx context.Context, id, decision string) error {
	if !ValidDecision(decision) {
		return fmt.Errorf("unknown decision %q: want one of %s", decision, strings.Join(Decisions, ", "))
	}
	resp, err := c.do(ctx, http.MethodPost, "/api/approvals/"+url.PathEscape(id)+"/decision", map[string]string{"decision": decision}, "application/json")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.Body.Close()
}

// Events opens GET /api/events. The caller reads with the returned reader
// and closes the body (or cancels ctx) when done.
func (c *Client) Events(ctx context.Context) (*SSEReader, io.Closer, error) {
	resp, err := c.do(ctx, http.MethodGet, "/api/events", nil, "text/event-stream")
	if err != nil {
		return nil, nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, nil, fmt.Errorf("GET /api/events answered content-type %q, want text/event-stream", ct)
	}
	return NewSSEReader(resp.Body), resp.Body, nil
}
