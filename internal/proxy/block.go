package proxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/netproxy/netproxy/hostpolicy"
)

// Block responses (SPEC §3.7). Every answer the proxy makes itself — a
// policy block as JSON (plain HTTP, intercepted requests) or text
// (CONNECT), the 503 of a disabled proxy, and the plain 400/431/502 of a
// malformed request or a failed upstream — is built by blockAnswer and
// written by writeAnswer (raw connections) or answerResponse (an
// *http.Response for the interceptor). Nothing else writes a block.

// answer is one response of the proxy's own.
type answer struct {
	status      int
	contentType string
	xProxyError string // "" for none
	body        string
	// approvalOutcome and approvalID: the approval service's part
	// (approval_outcome.go); "" for none.
	approvalOutcome, approvalID string
}

type blockedBody struct {
	Status   string `json:"status"`
	Host     string `json:"host"`
	Port     uint16 `json:"port"`
	Reason   string `json:"reason"`
	Decision string `json:"decision"`
	Source   string `json:"source"`
	Protocol string `json:"protocol"`
	Message  string `json:"message"`
	Cause    string `json:"cause"`
	// Rule is the index of the request rule that decided (SPEC §3.10).
	Rule *int `json:"rule,omitempty"`
	// Approval is the approval service's outcome (SPEC §3.7).
	Approval *approvalBody `json:"approval,omitempty"`
}

// blockAnswer is the block of a refused decision: JSON for requests
// (protocol http or https), text for a CONNECT (asJSON false), the 503
// text of a disabled proxy for both.
func blockAnswer(d hostpolicy.Decision, proto hostpolicy.Protocol, asJSON bool) answer {
	status := http.StatusForbidden
	switch d.Reason {
	case ReasonProxyLoop:
		status = http.StatusLoopDetected
	case hostpolicy.ReasonProxyAuthRequired:
		status = http.StatusProxyAuthRequired // with its challenge (writeAnswer)
	}
	if d.Reason == hostpolicy.ReasonProxyDisabled {
		return answer{status: http.StatusServiceUnavailable, contentType: "text/plain; charset=utf-8", xProxyError: d.XProxyError(), body: d.Message()}
	}
	if !asJSON {
		a := answer{status: status, contentType: "text/plain; charset=utf-8", xProxyError: d.XProxyError(), body: d.Message()}
		withApprovalOutcome(&a, d)
		return a
	}
	verdict := string(d.Verdict)
	if verdict != string(hostpolicy.Ask) {
		verdict = string(hostpolicy.Deny)
	}
	b := blockedBody{
		Status: "blocked", Host: d.Host, Port: d.Port, Reason: string(d.Reason), Decision: verdict,
		Source: string(d.Source), Protocol: string(proto), Message: d.Message(), Cause: string(d.BlockCause()),
	}
	if i, ok := d.RuleIndex(); ok {
		b.Rule = &i
	}
	b.Approval = approvalJSON(d)
	body, _ := json.Marshal(b)
	a := answer{status: status, contentType: "application/json", xProxyError: d.XProxyError(), body: string(body)}
	withApprovalOutcome(&a, d)
	return a
}

// textAnswer is a plain error of the proxy's own (400, 431, 502).
func textAnswer(status int, msg string) answer {
	return answer{status: status, contentType: "text/plain; charset=utf-8", body: msg + "\n"}
}

// writeAnswer writes a on a raw client connection and flushes. keep says
// whether the connection stays open; the answer to a HEAD carries the
// body's length but not the body (RFC 9112 §6.3).
func writeAnswer(bw *bufio.Writer, a answer, keep, head bool) {
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(a.status))
	bw.WriteByte(' ')
	bw.WriteString(http.StatusText(a.status))
	bw.WriteString("\r\nContent-Type: ")
	bw.WriteString(a.contentType)
	if a.xProxyError != "" {
		bw.WriteString("\r\nX-Proxy-Error: ")
		bw.WriteString(a.xProxyError)
	}
	if a.status == http.StatusProxyAuthRequired {
		bw.WriteString("\r\nProxy-Authenticate: " + proxyAuthChallenge)
	}
	writeApprovalHeaders(bw, a)
	bw.WriteString("\r\nContent-Length: ")
	bw.WriteString(strconv.Itoa(len(a.body)))
	if keep {
		bw.WriteString("\r\nConnection: keep-alive\r\n\r\n")
	} else {
		bw.WriteString("\r\nConnection: close\r\n\r\n")
	}
	if !head {
		bw.WriteString(a.body)
	}
	bw.Flush()
}

// answerResponse is a as an *http.Response (for the interceptor).
func answerResponse(req *http.Request, a answer) *http.Response {
	h := http.Header{"Content-Type": {a.contentType}}
	if a.xProxyError != "" {
		h["X-Proxy-Error"] = []string{a.xProxyError}
	}
	setApprovalHeaders(h, a)
	return &http.Response{
		StatusCode: a.status, ProtoMajor: 1, ProtoMinor: 1, Request: req, Header: h,
		ContentLength: int64(len(a.body)), Body: io.NopCloser(strings.NewReader(a.body)),
	}
}

// writeBlockedJSON writes the plain-HTTP block of SPEC §3.7.
func writeBlockedJSON(bw *bufio.Writer, d hostpolicy.Decision, keep, head bool) {
	writeAnswer(bw, blockAnswer(d, hostpolicy.ProtoHTTP, true), keep, head)
}

// writeBlockedText writes the CONNECT block of SPEC §3.7.
func writeBlockedText(bw *bufio.Writer, d hostpolicy.Decision) {
	writeAnswer(bw, blockAnswer(d, hostpolicy.ProtoHTTPS, false), false, false)
}

// writeSimple writes a text/plain response that closes the connection.
func writeSimple(bw *bufio.Writer, status int, msg string) { writeSimpleFor(bw, "", status, msg) }

// writeSimpleFor is writeSimple answering a request of the given method.
func writeSimpleFor(bw *bufio.Writer, method string, status int, msg string) {
	writeAnswer(bw, textAnswer(status, msg), false, method == http.MethodHead)
}

// blockedResponse is the JSON block of SPEC §3.7 as an *http.Response.
func blockedResponse(req *http.Request, d hostpolicy.Decision, proto hostpolicy.Protocol) *http.Response {
	return answerResponse(req, blockAnswer(d, proto, true))
}

// blockedJSONResponse is the block of a request inside an intercepted
// tunnel.
func blockedJSONResponse(req *http.Request, d hostpolicy.Decision) *http.Response {
	return blockedResponse(req, d, hostpolicy.ProtoHTTPS)
}
