package proxy

// Approval outcomes to the client (SPEC §3.7): a block the approval
// service took part in carries x-proxy-approval (pending, denied,
// timed_out, overloaded, unavailable) and x-proxy-approval-id, the JSON
// body's "approval" object, and Retry-After for pending; a request's
// x-proxy-approval-wait shortens its wait for a review and is hop-by-hop
// (removed before anything is forwarded: forward.go's hopByHop, the
// interceptor's Check).

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
)

// approvalWaitHeader is the request header that shortens the wait.
const approvalWaitHeader = "X-Proxy-Approval-Wait"

// pendingRetryAfter is the Retry-After of a pending answer, in seconds.
const pendingRetryAfter = "5"

// maxApprovalWait caps the header's value (longer is approvals.client_wait
// anyway) so that it cannot overflow a Duration.
const maxApprovalWait = 24 * time.Hour

// approvalWait reads x-proxy-approval-wait: whole seconds, 0 or more.
// Another value is refused (400) rather than ignored, so that a client
// that meant to poll learns its header is wrong instead of hanging.
func approvalWait(h http.Header) (time.Duration, bool, *answer) {
	vs := h[approvalWaitHeader]
	if len(vs) == 0 {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(strings.TrimSpace(vs[0]), 10, 32)
	if err != nil || len(vs) > 1 {
		a := textAnswer(http.StatusBadRequest, "x-proxy-approval-wait: give one value in whole seconds, 0 or more (0: answer at once, \"pending\" while the review stays open)")
		return 0, false, &a
	}
	return min(time.Duration(n)*time.Second, maxApprovalWait), true, nil
}

// withApprovalWait reads the header into req, or writes its 400 on bw and
// reports false (the connection then closes).
func withApprovalWait(bw *bufio.Writer, method string, h http.Header, req *hostpolicy.Request) bool {
	w, ok, bad := approvalWait(h)
	if bad != nil {
		writeAnswer(bw, *bad, false, method == http.MethodHead)
		return false
	}
	req.ApprovalWait, req.HasApprovalWait = w, ok
	return true
}

// approvalBody is the JSON block body's "approval" object.
type approvalBody struct {
	ID        string `json:"id"`
	Outcome   string `json:"outcome"`
	Retryable bool   `json:"retryable"`
}

// withApprovalOutcome adds the approval service's outcome of d to a.
func withApprovalOutcome(a *answer, d hostpolicy.Decision) {
	a.approvalOutcome, a.approvalID = d.ApprovalOutcome, d.ApprovalID
}

// approvalJSON is d's "approval" object, nil when the service took no part.
func approvalJSON(d hostpolicy.Decision) *approvalBody {
	if d.ApprovalOutcome == "" {
		return nil
	}
	return &approvalBody{ID: d.ApprovalID, Outcome: d.ApprovalOutcome, Retryable: d.ApprovalOutcome == "pending"}
}

// writeApprovalHeaders writes a's outcome header lines (raw connections).
func writeApprovalHeaders(bw *bufio.Writer, a answer) {
	if a.approvalOutcome == "" {
		return
	}
	bw.WriteString("\r\nX-Proxy-Approval: ")
	bw.WriteString(a.approvalOutcome)
	if a.approvalID != "" {
		bw.WriteString("\r\nX-Proxy-Approval-Id: ")
		bw.WriteString(a.approvalID)
	}
	if a.approvalOutcome == "pending" {
		bw.WriteString("\r\nRetry-After: " + pendingRetryAfter)
	}
}

// setApprovalHeaders is writeApprovalHeaders for an *http.Response.
func setApprovalHeaders(h http.Header, a answer) {
	if a.approvalOutcome == "" {
		return
	}
	h["X-Proxy-Approval"] = []string{a.approvalOutcome}
	if a.approvalID != "" {
		h["X-Proxy-Approval-Id"] = []string{a.approvalID}
	}
	if a.approvalOutcome == "pending" {
		h["Retry-After"] = []string{pendingRetryAfter}
	}
}
