package proxy

import (
	"net/netip"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/hostpolicy/hostname"
	"github.com/netproxy/netproxy/internal/observe"
)

// The TLS-name check of an opaque tunnel (SPEC §3.11, clienthello.go for
// the parser). It runs on the client→upstream direction when the client's
// first bytes arrive — a tunnel that sends nothing stays parked and pays
// nothing — and before any of them is written upstream.

// tlsPeekWait is how long a begun ClientHello may take to arrive whole;
// past it the tunnel is closed (real clients send it in one write).
const tlsPeekWait = 10 * time.Second

// peeksFirst: the client's first bytes are still to be checked.
func (t *Tunnel) peeksFirst() bool {
	return t.TLSName != "" || t.capture != nil && !t.capture.checked
}

// firstBytes runs the first bytes' check on the client→upstream
// direction; false: that direction is over (the tunnel ended, or its
// client connection went on as plain HTTP).
func (t *Tunnel) firstBytes() bool {
	if t.checkTLSName() {
		return true
	}
	if t.handedOver() {
		t.dirEnded()
		t.capture.serveHandedOver()
		return false
	}
	t.acc.setCause(causePolicy)
	t.abort()
	t.dirEnded()
	return false
}

// checkTLSName reads the client's first bytes (the early ones first) until
// parseClientHello decides, then forwards them or ends the tunnel; false:
// the tunnel must end (the caller aborts it), or a captured connection's
// plain HTTP took the client over (handedOver). It runs once per tunnel.
func (t *Tunnel) checkTLSName() bool {
	name := t.TLSName
	t.TLSName = ""
	if t.capture != nil {
		t.capture.checked = true
	}
	buf := t.Early
	t.Early = nil
	t.Client.SetReadDeadline(time.Now().Add(tlsPeekWait))
	for {
		names, v := parseClientHello(buf)
		switch v {
		case helloNotTLS:
			if t.capture != nil {
				var taken bool
				if buf, taken = t.capture.takeOver(t, buf); taken {
					return false
				}
			}
			return t.forwardPeeked(buf)
		case helloName:
			for _, n := range names {
				if name == "" {
					break // a captured tunnel without the name check
				}
				if got, err := hostname.Normalize(n); err != nil || got != name {
					t.tlsMismatch(name, n)
					return false
				}
			}
			return t.forwardPeeked(buf)
		case helloMalformed:
			t.tlsMismatch(name, "")
			return false
		}
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, max(2048, len(buf)))...)[:len(buf)]
		}
		n, err := t.Client.Read(buf[len(buf):min(cap(buf), maxClientHello)])
		buf = buf[:len(buf)+n]
		if err != nil && n == 0 {
			// A ClientHello cut short by the client's end or by the wait:
			// nothing of it has gone upstream, and nothing will.
			return false
		}
	}
}

// forwardPeeked writes the checked bytes upstream and re-arms the
// client's deadline for the ordinary relay.
func (t *Tunnel) forwardPeeked(buf []byte) bool {
	t.armWait(t.Client)
	if len(buf) == 0 {
		return true
	}
	n, err := t.Upstream.Write(buf)
	t.Meter.Bytes("up", string(t.Protocol), int64(n))
	t.acc.count(dirUp, int64(n))
	t.last.Store(time.Now().UnixNano())
	return err == nil
}

func (t *Tunnel) tlsMismatch(name, sni string) {
	if t.sni != nil {
		t.sni.report(t, name, sni)
	}
}

// sniReport is what a tunnel with the TLS-name check keeps for the report
// of a mismatch (an sni_mismatch decision, audited and counted): the
// allowed decision's fields that line repeats, not the decision itself
// (every idle tunnel to a name holds one: 80 bytes instead of a 288-byte
// Decision and a closure). A decision carrying more than these (a request
// rule, an approval, a narrower level, a trace, a shadow verdict) is kept
// whole in full.
// The tunnel supplies the rest: its host (TLSName), connection (Owner)
// and protocol.
type sniReport struct {
	core    *Core
	pattern string
	addrs   []netip.Addr
	cause   hostpolicy.Cause
	port    uint16
	full    *hostpolicy.Decision
}

// tlsNameCheck returns what a tunnel of d needs for the TLS-name check:
// the name and the report of a mismatch; "" and nil when d needs none.
func (c *Core) tlsNameCheck(d *hostpolicy.Decision) (string, *sniReport) {
	if !d.CheckTLSName || d.Intercept {
		return "", nil
	}
	r := &sniReport{core: c, pattern: d.Pattern, addrs: d.Addrs, cause: d.Cause, port: d.Port}
	if !sniCompact(d) {
		full := *d
		r.full = &full
	}
	return d.Host, r
}

// sniCompact: every field of d that sniReport does not keep is empty (or
// one the report sets itself), so the decision can be rebuilt from it.
// TestSNIReportKeepsEveryField names each Decision field one way or the
// other.
func sniCompact(d *hostpolicy.Decision) bool {
	return d.Level == "" && !d.LocalLiteral && d.Rule == 0 && !d.RuleAllowed && d.RuleMessage == "" && len(d.Steps) == 0 &&
		d.Shadow == nil && d.ApprovalID == "" && d.ApprovalOutcome == "" && d.Override == "" && d.Rationale == ""
}

// blocked is the sni_mismatch decision of a tunnel to name: its allowed
// decision, rebuilt, turned into the block.
func (r *sniReport) blocked(name string) hostpolicy.Decision {
	var d hostpolicy.Decision
	if r.full != nil {
		d = *r.full
	} else {
		d = hostpolicy.Decision{Host: name, Port: r.port, Pattern: r.pattern, Addrs: r.addrs, Cause: r.cause}
	}
	d.Verdict, d.Reason, d.Source = hostpolicy.Deny, hostpolicy.ReasonSNIMismatch, hostpolicy.SourceBaseline
	d.CheckTLSName = false
	return d
}

// report logs, audits and counts tunnel t to name closed for the TLS name
// sni it carried ("" for a malformed or oversized ClientHello).
func (r *sniReport) report(t *Tunnel, name, sni string) {
	c := r.core
	bd := r.blocked(name)
	c.logger().Info("tunnel closed: TLS name is not the tunnel's", "host", name, "port", int(r.port), "sni", sni)
	if c.Sink != nil {
		method := ""
		if t.Protocol == hostpolicy.ProtoHTTPS {
			method = "CONNECT" // a CONNECT tunnel's; a SOCKS5 request has none
		}
		c.Sink.ObserveDecision(observe.DecisionEvent{Time: time.Now(), Request: c.request(t.Owner, name, r.port, t.Protocol, method), Decision: bd})
	}
}
