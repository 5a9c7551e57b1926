package proxy

import (
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

// checkTLSName reads the client's first bytes (the early ones first) until
// parseClientHello decides, then forwards them or ends the tunnel; false:
// the tunnel must end (the caller aborts it). It runs once per tunnel.
func (t *Tunnel) checkTLSName() bool {
	name := t.TLSName
	t.TLSName = ""
	buf := t.Early
	t.Early = nil
	t.Client.SetReadDeadline(time.Now().Add(tlsPeekWait))
	for {
		names, v := parseClientHello(buf)
		switch v {
		case helloNotTLS:
			return t.forwardPeeked(buf)
		case helloName:
			for _, n := range names {
				if got, err := hostname.Normalize(n); err != nil || got != name {
					t.tlsMismatch(n)
					return false
				}
			}
			return t.forwardPeeked(buf)
		case helloMalformed:
			t.tlsMismatch("")
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

func (t *Tunnel) tlsMismatch(sni string) {
	if t.OnTLSMismatch != nil {
		t.OnTLSMismatch(sni)
	}
}

// tlsNameCheck returns what a tunnel of d needs for the TLS-name check:
// the name and the report of a mismatch (audited and counted as a
// sni_mismatch decision); "" when d needs none.
func (c *Core) tlsNameCheck(conn *Conn, d hostpolicy.Decision, proto hostpolicy.Protocol, method string) (string, func(string)) {
	if !d.CheckTLSName || d.Intercept {
		return "", nil
	}
	return d.Host, func(sni string) {
		bd := d
		bd.Verdict, bd.Reason, bd.Source = hostpolicy.Deny, hostpolicy.ReasonSNIMismatch, hostpolicy.SourceBaseline
		bd.CheckTLSName = false
		c.logger().Info("tunnel closed: TLS name is not the tunnel's", "host", d.Host, "port", int(d.Port), "sni", sni)
		if c.Sink != nil {
			c.Sink.ObserveDecision(observe.DecisionEvent{Time: time.Now(), Request: c.request(conn, d.Host, d.Port, proto, method), Decision: bd})
		}
	}
}
