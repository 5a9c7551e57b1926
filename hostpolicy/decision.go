// Package hostpolicy owns the network decision pipeline of SPEC §3: host
// normalisation, pattern matching, the non-public address classifier,
// resolution with pinning, narrower per-session and per-execution
// policies, and the one ordered list of stages every decision runs
// (pipeline.go: proxy state → normalise → deny → local guard → allow →
// scopes → resolve → address scopes → decider → mode guard → admission).
//
// It must never dial, never log a request's query string or headers, and never
// let a decider override a decision other than not_allowed.
package hostpolicy

import (
	"context"
	"net/netip"
	"time"
)

// Verdict is the outcome class of a NetworkDecision.
type Verdict string

const (
	Allow Verdict = "allow"
	Deny  Verdict = "deny"
	// Ask blocks like Deny but tells the client an approval may be requested.
	Ask Verdict = "ask"
)

// Reason says why a request was blocked (SPEC §3.6).
type Reason string

const (
	ReasonNone                Reason = ""
	ReasonDenied              Reason = "denied"
	ReasonNotAllowed          Reason = "not_allowed"
	ReasonNotAllowedLocal     Reason = "not_allowed_local"
	ReasonMethodNotAllowed    Reason = "method_not_allowed"
	ReasonMITMRequired        Reason = "mitm_required"
	ReasonMITMHookDenied      Reason = "mitm_hook_denied"
	ReasonProxyDisabled       Reason = "proxy_disabled"
	ReasonAttributionRejected Reason = "attribution_rejected"
	ReasonPolicyDenied        Reason = "policy_denied"
	// ReasonCredentialMisuse: a live credential placeholder toward a host
	// it does not belong to, or from another execution (docs/credentials.md).
	ReasonCredentialMisuse Reason = "credential_misuse"
	// ReasonRequestDenied: a request rule (SPEC §3.10) denied the request,
	// its path does not normalise, or its ask was not approved.
	ReasonRequestDenied Reason = "request_denied"
	// ReasonSNIMismatch: an opaque tunnel's ClientHello named another host
	// than the tunnel's (domain fronting, SPEC §3.11).
	ReasonSNIMismatch Reason = "sni_mismatch"
)

// Source says which stage made a decision (SPEC §3.6).
type Source string

const (
	SourceBaseline   Source = "baseline_policy"
	SourceDecider    Source = "decider"
	SourceModeGuard  Source = "mode_guard"
	SourceProxyState Source = "proxy_state"
)

// Protocol is the request's protocol as used in decisions, cache keys and metrics.
type Protocol string

const (
	ProtoHTTP   Protocol = "http"
	ProtoHTTPS  Protocol = "https" // CONNECT
	ProtoSOCKS5 Protocol = "socks5-tcp"
)

// Request is one network request entering the chain.
type Request struct {
	Host     string // raw host as the client sent it (normalised by Evaluate)
	Port     uint16
	Protocol Protocol
	Method   string // HTTP method for plain HTTP; "CONNECT" for CONNECT; "" for SOCKS5
	// Path is the request target's path as sent (query included or not:
	// the request stage drops it); empty for a tunnel. It is judged by the
	// request rules and never audited (it may carry a token).
	Path   string
	Client string // client remote address, for logs and audit
	// Upgrade: the HTTP request carries an Upgrade header (WebSocket, h2c,
	// anything). After a 101 nothing is checked, so the limited-mode guard
	// refuses it (SPEC §3.8) whatever the method.
	Upgrade bool

	// Attribution, filled from the frame (SPEC §4). Empty when unattributed.
	ExecutionID   string
	SessionID     string
	EnvironmentID string

	// ApprovalWait is the client's x-proxy-approval-wait (SPEC §3.7) when
	// HasApprovalWait: how long it waits for a review before it is told
	// "pending" (0: not at all); without it, approvals.client_wait.
	ApprovalWait    time.Duration
	HasApprovalWait bool

	// Trace asks for Decision.Steps (netproxy check). The data path leaves
	// it off: nothing there reads the steps, and recording them costs an
	// allocation and string building on every request.
	Trace bool
}

// StepName names a stage of the chain as `netproxy check` reports it
// (SPEC §7.1). The chain is declared once, in this order.
type StepName string

const (
	StepDeny       StepName = "deny"
	StepLocalGuard StepName = "local_guard"
	StepAllow      StepName = "allow"
	StepRequest    StepName = "request" // the request rules (SPEC §3.10)
	StepMode       StepName = "mode"
)

// StepResult is what one stage concluded.
type StepResult string

const (
	ResultHit   StepResult = "hit"
	ResultMiss  StepResult = "miss"
	ResultPass  StepResult = "pass"
	ResultBlock StepResult = "block"
)

// Step is one stage of the chain as reported by `netproxy check`.
type Step struct {
	Step   StepName   `json:"step"`
	Result StepResult `json:"result"`
	Detail string     `json:"detail,omitempty"`
}

// Decision is the NetworkDecision of SPEC §3.6 plus what the dialer needs.
type Decision struct {
	Verdict Verdict
	Reason  Reason
	Source  Source

	Host    string // normalised host
	Port    uint16
	Pattern string // the list pattern that decided, if any

	// Addrs are the addresses checked by the local guard; the dialer dials
	// exactly these (SPEC §3.5). Empty when the guard was skipped
	// (allow_local_binding) — the dialer then resolves through the same resolver.
	// Read-only: they may be the policy's own static answers.
	Addrs []netip.Addr
	// LocalLiteral is true when the target is a local literal allowed by an
	// exact allow-list entry or an allow-list prefix: the dialer may then
	// connect to it.
	LocalLiteral bool
	// Intercept is set on an allowed limited-mode CONNECT admitted to MITM
	// interception (Options.MITM): every inner request must be re-checked.
	Intercept bool
	// Cause is the typed cause of an admission stage's mark or block
	// (RunOptions.Admit); empty otherwise.
	Cause Cause
	// Rule is the request rule that decided, as its 0-based index + 1
	// (RuleIndex); 0 when no rule matched.
	Rule int
	// RuleAllowed: an allow rule (or a reviewer's answer to an ask rule)
	// admitted this request, so the limited-mode method guard does not
	// apply — and it is the one way an Upgrade passes in limited mode
	// (SPEC §3.8): the Upgrade refusal must honour it.
	RuleAllowed bool
	// RuleMessage is the deciding rule's client-facing message ("" →
	// the reason's default; Message returns it).
	RuleMessage string
	// CheckTLSName: an allowed opaque tunnel (CONNECT or SOCKS5) to a name
	// whose first client bytes must carry no SNI or this host's (SPEC §3.11,
	// network.check_tls_name). An intercepted tunnel ignores it.
	CheckTLSName bool
	// noTrace: addStep records nothing (offline judgements).
	noTrace bool

	Steps []Step

	// Level is the narrower policy that blocked the request
	// (LevelExecution or LevelSession); empty when the host-wide chain or
	// the decider decided.
	Level string
	// Shadow is the candidate policy's decision when it disagrees with
	// this one ([shadow]); nil otherwise. It never changes this decision.
	Shadow *ShadowDecision

	// Filled by the decider when it answered. ApprovalOutcome is what a
	// client is told of a refusal the approval service took part in (SPEC
	// §3.7: pending, denied, timed_out, overloaded, unavailable; "" when it
	// did not).
	ApprovalID      string
	ApprovalOutcome string
	Override        string // e.g. "allow_session", "hook", "guardian"
	Rationale       string
}

// addStep records one step of the trace.
func (d *Decision) addStep(s Step) {
	if !d.noTrace {
		d.Steps = append(d.Steps, s)
	}
}

// AddStep records one step of the trace of a decision the pipeline made
// (the admission stages'): like the pipeline's own, nothing is recorded
// when the request asked for no trace (Request.Trace, the data path).
func (d *Decision) AddStep(s Step) { d.addStep(s) }

// tracing reports whether addStep records: a step whose detail is built
// (concatenated) is recorded only then, so that the data path, which
// keeps no trace, builds no string.
func (d *Decision) tracing() bool { return !d.noTrace }

// RuleIndex is the deciding request rule's 0-based index.
func (d Decision) RuleIndex() (int, bool) { return d.Rule - 1, d.Rule > 0 }

// Allowed reports whether the request may proceed.
func (d Decision) Allowed() bool { return d.Verdict == Allow }

// Decider is the approval service behind not_allowed (SPEC §5). It is called
// only for a baseline decision with reason not_allowed and returns the final
// decision. Implementations must fail closed.
type Decider interface {
	Decide(ctx context.Context, req Request, baseline Decision) Decision
}

// ShadowDecision is what the candidate ([shadow]) policy would have
// decided for a request (SPEC issue 15): its verdict, reason and pattern.
type ShadowDecision struct {
	Verdict Verdict
	Reason  Reason
	Pattern string
	Source  Source
	Level   string
}
