package selftest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/netproxy/netproxy/sandbox/capture"
	"golang.org/x/net/dns/dnsmessage"
)

// Transparent capture's probes (SPEC §6.6, docs/sandbox.md "Transparent
// capture"); skipped when the run does not capture.

// captureProbes are skipped when capture is off.
var captureProbes = []string{"capture.denied-connect", "capture.udp-9", "capture.dns-txt"}

// captureResolver is the sandbox's resolver when capture is on.
const captureResolver = "127.0.0.53:53"

// captureActive: the plan asks for capture and this sandbox has it (the
// landlock tier, which `--tier auto` may fall back to, never does).
func captureActive(p *Plan) (bool, string) {
	if !p.Capture {
		return false, "transparent capture is off"
	}
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil || !strings.Contains(string(b), "nameserver 127.0.0.53") {
		return false, "this tier does not capture (no network namespace of its own)"
	}
	return true, ""
}

// poolAnswer reports whether msg is a DNS answer whose every address lies
// in the capture pools (and there is at least one): the sandbox's own
// resolver, which asked no one.
func poolAnswer(msg []byte) bool {
	var pr dnsmessage.Parser
	if _, err := pr.Start(msg); err != nil || pr.SkipAllQuestions() != nil {
		return false
	}
	n := 0
	for {
		h, err := pr.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			return n > 0
		}
		if err != nil {
			return false
		}
		var a netip.Addr
		switch h.Type {
		case dnsmessage.TypeA:
			r, err := pr.AResource()
			if err != nil {
				return false
			}
			a = netip.AddrFrom4(r.A)
		case dnsmessage.TypeAAAA:
			r, err := pr.AAAAResource()
			if err != nil {
				return false
			}
			a = netip.AddrFrom16(r.AAAA)
		default:
			return false
		}
		if !capture.DefaultPoolV4.Contains(a) && !capture.DefaultPoolV6.Contains(a) {
			return false
		}
		n++
	}
}

// capturedEnd reads what a captured connection brings after the probe
// wrote its nonce: netproxy refuses the destination, so a reset or an end
// without a byte.
func capturedEnd(c net.Conn) string {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(dialTimeout))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if n > 0 {
		return fmt.Sprintf("%d bytes came back", n)
	}
	return errText(err)
}

// probeCaptureDenied looks up a unique name no policy allows (the
// sandbox's resolver must give it a pool address without asking anyone)
// and connects to it: netproxy refuses it, so the connection must be reset
// with no byte back.
func probeCaptureDenied(ctx context.Context, p *Plan, name string) Result {
	if ok, why := captureActive(p); !ok {
		return Result{Name: name, Result: Skipped, Evidence: why}
	}
	host := p.ExfilName("capture")
	var r net.Resolver
	addrs, err := r.LookupNetIP(ctx, "ip4", host)
	if err != nil || len(addrs) == 0 {
		return failed("the sandbox's resolver gave %s no address: %v", host, err)
	}
	if !capture.DefaultPoolV4.Contains(addrs[0]) {
		return escaped("%s resolved to %s, outside the capture pool: a real resolver answered", host, addrs[0])
	}
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(addrs[0].String(), "443"))
	if err != nil {
		return held("connect to %s (%s) refused: %s", host, addrs[0], errText(err))
	}
	fmt.Fprintf(c, "execwrap-selftest %s %s\n", p.Nonce, name)
	end := capturedEnd(c)
	if strings.Contains(end, "bytes came back") {
		return escaped("a connection to the denied %s (%s) was answered: %s", host, addrs[0], end)
	}
	return held("connection to the denied %s (%s) ended by netproxy's refusal: %s", host, addrs[0], end)
}

// probeCaptureUDP sends a datagram to the discard port of a TEST-NET
// address: every UDP but the resolver's must be refused.
func probeCaptureUDP(ctx context.Context, p *Plan, name string) Result {
	if ok, why := captureActive(p); !ok {
		return Result{Name: name, Result: Skipped, Evidence: why}
	}
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, "udp4", "192.0.2.1:9")
	if err != nil {
		return held("%s", errText(err))
	}
	defer c.Close()
	if _, err := c.Write([]byte("execwrap-selftest " + p.Nonce)); err != nil {
		return held("send refused: %s", errText(err))
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c.Read(make([]byte, 64)); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return escaped("a datagram to 192.0.2.1:9 was sent without an error: not refused")
		}
		return held("refused after send: %s", errText(err))
	}
	return escaped("192.0.2.1:9 answered")
}

// probeCaptureTXT asks the sandbox's resolver for a TXT record (a classic
// exfiltration carrier): it must answer REFUSED and carry no record.
func probeCaptureTXT(ctx context.Context, p *Plan, name string) Result {
	if ok, why := captureActive(p); !ok {
		return Result{Name: name, Result: Skipped, Evidence: why}
	}
	n, err := dnsmessage.NewName(p.ExfilName("txt") + ".")
	if err != nil {
		return failed("build query: %v", err)
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x5e1f, RecursionDesired: true})
	_ = b.StartQuestions()
	_ = b.Question(dnsmessage.Question{Name: n, Type: dnsmessage.TypeTXT, Class: dnsmessage.ClassINET})
	q, err := b.Finish()
	if err != nil {
		return failed("build query: %v", err)
	}
	what, ans := udpExchangeMsg(ctx, captureResolver, q)
	if ans == nil {
		return failed("no answer from the sandbox's resolver: %s", what)
	}
	var pr dnsmessage.Parser
	h, err := pr.Start(ans)
	if err != nil {
		return failed("unreadable answer: %v", err)
	}
	_ = pr.SkipAllQuestions()
	if rr, err := pr.AnswerHeader(); err == nil {
		return escaped("TXT answered with a %s record", rr.Type)
	}
	if h.RCode != dnsmessage.RCodeRefused {
		return escaped("TXT answered %s, want REFUSED", h.RCode)
	}
	return held("TXT for %s: REFUSED, no record", p.ExfilName("txt"))
}
