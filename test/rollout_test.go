package test

// Issue 15: safe policy rollout (shadow policy, `netproxy replay`) and
// narrower per-execution / per-session network policies, end to end with
// the real binaries and curl.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// framingBridge listens on 127.0.0.1 and forwards every connection to the
// proxy at proxyAddr after writing token's attribution frame — what
// execwrap's bridge does — so that curl's requests are attributed.
func framingBridge(t *testing.T, proxyAddr, token string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				up, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
				if err != nil {
					return
				}
				defer up.Close()
				if _, err := up.Write(Frame(token)); err != nil {
					return
				}
				done := make(chan struct{}, 2)
				go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				go func() { io.Copy(c, up); done <- struct{}{} }()
				<-done
				// The proxy closing its side (a policy change) reaches
				// the client at once, as with execwrap's bridge.
				c.Close()
				up.Close()
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// registerWith registers an execution with a raw JSON "network" object
// (or none) and returns the decoded answer and status.
func registerWith(t *testing.T, p *Proxy, session, network string) (int, map[string]any) {
	t.Helper()
	body := fmt.Sprintf(`{"session_id":%q,"environment_id":"env","command":["curl"],"cwd":"/tmp"`, session)
	if network != "" {
		body += `,"network":` + network
	}
	body += "}"
	resp, err := p.ControlClient().Post("http://netproxy/v1/executions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func controlDo(t *testing.T, p *Proxy, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://netproxy"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.ControlClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// auditDecisions returns the audit's network_decision lines for host
// (every line when host is ""), waiting until at least want exist.
func auditDecisions(t *testing.T, path, host string, want int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var out []map[string]any
		b, _ := os.ReadFile(path)
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["event"] == "network_decision" && (host == "" || m["host"] == host) {
				out = append(out, m)
			}
		}
		if len(out) >= want || time.Now().After(deadline) {
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metricValue returns the value of the first /metrics sample line that
// starts with prefix (-1 when absent).
func rolloutMetric(t *testing.T, p *Proxy, prefix string) float64 {
	t.Helper()
	_, body := p.AdminRequest(t, http.MethodGet, "/metrics", p.Token)
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			var v float64
			fmt.Sscan(strings.TrimSpace(l[len(prefix):]), &v)
			return v
		}
	}
	return -1
}

// curlVia fetches url through the HTTP proxy at proxy and returns the
// status code curl saw.
func curlVia(t *testing.T, proxy, url string, extra ...string) string {
	t.Helper()
	r := Curl(t, append([]string{"-o", "/dev/null", "-w", "%{http_code}", "-x", "http://" + proxy, url}, extra...)...)
	return r.Stdout
}

// TestShadowCandidateShowsDisagreementsWhileTrafficFlows: a candidate that
// removes an allowed host shows up in the metric, the audit line and
// /api/shadow, while the live decision (and traffic) is unchanged.
func TestShadowCandidateShowsDisagreementsWhileTrafficFlows(t *testing.T) {
	up := StartUpstream(t, false)
	c := StdConfig()
	c.Extra = "[shadow]\nconfig = \"candidate.toml\"\n"
	p := WriteProxyConfig(t, c)
	dns := startCountingDNS(t, map[string][]string{"fresh.test": {"127.0.0.1"}})
	appendConfig(t, p.ConfigPath, fmt.Sprintf("\n[dns]\nservers = [%q]\n", dns.Addr))
	cand := StdConfig()
	cand.Domains = [][2]string{{"closed.test", "allow"}, {"denied.test", "deny"}, {"other.test", "allow"}, {"fresh.test", "allow"}}
	if err := os.WriteFile(filepath.Join(p.Dir, "candidate.toml"), []byte(cand.toml()), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Start(t)

	// A name only the candidate allows: the live chain blocks it before
	// any lookup, and the shadow judgement must not look it up either.
	if code := curlVia(t, p.HTTP, up.URL("fresh.test", "/hello")); code != "403" {
		t.Fatalf("fresh.test live: %s", code)
	}
	if n := dns.Total(); n != 0 {
		t.Fatalf("the shadow evaluation made %d DNS queries", n)
	}
	if l := auditDecisions(t, p.Audit, "fresh.test", 1); len(l) != 1 || l[0]["shadow"] == nil {
		t.Fatalf("fresh.test shadow: %v", l)
	}

	for i := 0; i < 3; i++ {
		if code := curlVia(t, p.HTTP, up.URL("up.test", "/hello")); code != "200" {
			t.Fatalf("live traffic to up.test: %s, want 200 (the shadow must never change it)", code)
		}
	}
	if code := curlVia(t, p.HTTP, up.URL("closed.test", "/hello")); code != "200" {
		t.Fatalf("closed.test: %s", code)
	}
	if code := curlVia(t, p.HTTP, up.URL("other.test", "/hello")); code != "403" {
		t.Fatalf("other.test: %s, want 403 live", code)
	}
	if up.Hits() != 4 {
		t.Fatalf("upstream hits %d, want 4", up.Hits())
	}

	if v := rolloutMetric(t, p, `netproxy_shadow_decisions_total{live="allow",shadow="deny"}`); v != 3 {
		t.Fatalf(`shadow_decisions_total{live="allow",shadow="deny"} = %v, want 3`, v)
	}
	if v := rolloutMetric(t, p, `netproxy_shadow_decisions_total{live="deny",shadow="allow"}`); v != 2 {
		t.Fatalf(`shadow_decisions_total{live="deny",shadow="allow"} = %v, want 2`, v)
	}
	if v := rolloutMetric(t, p, `netproxy_shadow_config_loaded`); v != 1 {
		t.Fatalf("shadow_config_loaded = %v", v)
	}

	lines := auditDecisions(t, p.Audit, "up.test", 3)
	if len(lines) != 3 {
		t.Fatalf("%d up.test audit lines", len(lines))
	}
	for _, l := range lines {
		sh, _ := l["shadow"].(map[string]any)
		if l["decision"] != "allow" || sh == nil || sh["decision"] != "deny" || sh["reason"] != "not_allowed" {
			t.Fatalf("audit line lacks the shadow disagreement: %v", l)
		}
		if addrs, _ := l["addrs"].([]any); len(addrs) != 1 || addrs[0] != "127.0.0.1" {
			t.Fatalf("audit line addrs %v, want [127.0.0.1]", l["addrs"])
		}
	}
	if l := auditDecisions(t, p.Audit, "closed.test", 1); len(l) != 1 || l[0]["shadow"] != nil {
		t.Fatalf("an agreeing decision carries shadow: %v", l)
	}

	if code, _ := p.AdminRequest(t, http.MethodGet, "/api/shadow", ""); code != http.StatusUnauthorized {
		t.Fatalf("/api/shadow without the token: %d, want 401", code)
	}
	code, body := p.AdminRequest(t, http.MethodGet, "/api/shadow", p.Token)
	if code != 200 {
		t.Fatalf("/api/shadow: %d %s", code, body)
	}
	var sum struct {
		Status        string `json:"status"`
		Disagreements int    `json:"disagreements"`
		Hosts         []struct {
			Host       string `json:"host"`
			AllowBlock int    `json:"allow_to_block"`
			BlockAllow int    `json:"block_to_allow"`
			Reasons    []struct {
				Reason string `json:"reason"`
			} `json:"reasons"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal([]byte(body), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Status != "active" || sum.Disagreements != 5 || len(sum.Hosts) != 3 {
		t.Fatalf("/api/shadow summary %s", body)
	}
	if h := sum.Hosts[0]; h.Host != "up.test" || h.AllowBlock != 3 || h.BlockAllow != 0 || len(h.Reasons) != 1 || h.Reasons[0].Reason != "not_allowed" {
		t.Fatalf("/api/shadow up.test row %+v", h)
	}
	if h := sum.Hosts[2]; h.Host != "other.test" || h.BlockAllow != 1 {
		t.Fatalf("/api/shadow other.test row %+v", h)
	}
}

// TestShadowBadCandidateLiveStillLoads: a candidate that does not compile
// leaves the live config serving; the error is logged, counted and shown
// by /api/shadow, at start and on reload.
func TestShadowBadCandidateLiveStillLoads(t *testing.T) {
	up := StartUpstream(t, false)
	c := StdConfig()
	c.Extra = "[shadow]\nconfig = \"candidate.toml\"\n"
	p := WriteProxyConfig(t, c)
	candPath := filepath.Join(p.Dir, "candidate.toml")
	bad := "[network]\nmode = \"full\"\n[network.domains]\n\"a/b.test\" = \"allow\"\n"
	os.WriteFile(candPath, []byte(bad), 0o644)
	p.Start(t)

	if code := curlVia(t, p.HTTP, up.URL("up.test", "/hello")); code != "200" {
		t.Fatalf("live policy not serving: %s", code)
	}
	code, body := p.AdminRequest(t, http.MethodGet, "/api/shadow", p.Token)
	if code != 200 || !strings.Contains(body, `"status":"error"`) || !strings.Contains(body, "candidate.toml") || !strings.Contains(body, "a/b.test") {
		t.Fatalf("/api/shadow does not report the bad candidate: %d %s", code, body)
	}
	if v := rolloutMetric(t, p, "netproxy_shadow_config_errors_total"); v != 1 {
		t.Fatalf("shadow_config_errors_total = %v, want 1", v)
	}
	if !strings.Contains(p.Output.String(), "shadow policy did not load") {
		t.Fatalf("no log line for the bad candidate:\n%s", p.Output.String())
	}
	// A reload keeps the live policy, counts the error again…
	if code, body := p.AdminRequest(t, http.MethodPost, "/api/reload", p.Token); code != 200 {
		t.Fatalf("reload with a bad candidate failed the live reload: %d %s", code, body)
	}
	if v := rolloutMetric(t, p, "netproxy_shadow_config_errors_total"); v != 2 {
		t.Fatalf("shadow_config_errors_total after reload = %v, want 2", v)
	}
	// …and a fixed candidate is picked up by the next reload.
	good := StdConfig()
	good.Domains = [][2]string{{"closed.test", "allow"}}
	os.WriteFile(candPath, []byte(good.toml()), 0o644)
	p.AdminRequest(t, http.MethodPost, "/api/reload", p.Token)
	if _, body := p.AdminRequest(t, http.MethodGet, "/api/shadow", p.Token); !strings.Contains(body, `"status":"active"`) {
		t.Fatalf("fixed candidate not active after reload: %s", body)
	}
	if code := curlVia(t, p.HTTP, up.URL("up.test", "/hello")); code != "200" {
		t.Fatalf("live traffic after reload: %s", code)
	}
	if v := rolloutMetric(t, p, `netproxy_shadow_decisions_total{live="allow",shadow="deny"}`); v != 1 {
		t.Fatalf("disagreement after the fixed candidate loaded: %v", v)
	}
}

// replayTraffic is the request mix both runs of the replay test send:
// (host, protocol) pairs through curl.
var replayHosts = []string{"up.test", "closed.test", "other.test", "denied.test", "lan.test", "up.test", "pub.test"}

func sendReplayTraffic(t *testing.T, p *Proxy, up *Upstream) {
	t.Helper()
	for _, h := range replayHosts {
		curlVia(t, p.HTTP, up.URL(h, "/hello"))
		// The same host through CONNECT (https protocol in the audit).
		Curl(t, "-o", "/dev/null", "-p", "-x", "http://"+p.HTTP, "http://"+h+fmt.Sprintf(":%d/hello", up.Port))
	}
}

type replayJSON struct {
	Decisions    int `json:"decisions"`
	Malformed    int `json:"malformed"`
	Changed      int `json:"changed"`
	NewlyBlocked int `json:"newly_blocked"`
	NewlyAllowed int `json:"newly_allowed"`
	Hosts        []struct {
		Host       string `json:"host"`
		AllowBlock int    `json:"allow_to_block"`
		BlockAllow int    `json:"block_to_allow"`
		Changes    []struct {
			Reason string `json:"reason"`
		} `json:"changes"`
	} `json:"hosts"`
}

func runReplay(t *testing.T, p *Proxy, args ...string) (int, string, string) {
	t.Helper()
	cmd := NetproxyCmd(t, p, append([]string{"replay"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// TestReplayPredictsTheCandidate: replay over the audit log of a real run
// predicts exactly what the candidate then does when made live.
func TestReplayPredictsTheCandidate(t *testing.T) {
	up := StartUpstream(t, false)
	live := ProxyConfig{
		Domains: [][2]string{
			{"up.test", "allow"}, {"closed.test", "allow"}, {"lan.test", "allow"}, {"pub.test", "allow"},
			{"denied.test", "deny"},
			// The names' loopback answers pass the local guard through
			// this prefix; the chain resolves and pins them.
			{"127.0.0.0/8", "allow"},
		},
		// lan.test and pub.test are resolved by a real lookup the audit
		// records (no static answer): the candidate's address entries are
		// judged against what was pinned.
		Hosts: map[string][]string{"up.test": {"127.0.0.1"}, "closed.test": {"127.0.0.1"}, "other.test": {"127.0.0.1"}, "denied.test": {"127.0.0.1"}},
	}
	p := WriteProxyConfig(t, live)
	// lan.test and pub.test resolve through a DNS server of the test's
	// own (both to 127.0.0.1); the audit records the pinned answer.
	dns := startCountingDNS(t, map[string][]string{"lan.test": {"127.0.0.2"}, "pub.test": {"127.0.0.1"}})
	appendConfig(t, p.ConfigPath, fmt.Sprintf("\n[dns]\nservers = [%q]\n", dns.Addr))
	p.Start(t)
	sendReplayTraffic(t, p, up)
	first := auditDecisions(t, p.Audit, "", 2*len(replayHosts))
	if len(first) != 2*len(replayHosts) {
		t.Fatalf("%d audit lines in the first run, want %d", len(first), 2*len(replayHosts))
	}

	// The candidate: up.test removed, other.test added, lan.test's
	// pinned address denied by a CIDR entry, closed.test denied.
	candPath := filepath.Join(p.Dir, "candidate.toml")
	liveText := readFile(t, p.ConfigPath)
	candText := strings.Replace(liveText, `"up.test" = "allow"`, `"other.test" = "allow"`, 1)
	candText = strings.Replace(candText, `"closed.test" = "allow"`, `"closed.test" = "deny"`+"\n"+`"127.0.0.2/32" = "deny"`, 1)
	candText = strings.Replace(candText, `"pub.test" = "allow"`, `"pub.test" = "deny"`, 1)
	os.WriteFile(candPath, []byte(candText), 0o644)
	if strings.Count(candText, `"other.test" = "allow"`) != 1 {
		t.Fatalf("candidate not written as intended:\n%s", candText)
	}

	code, out, stderr := runReplay(t, p, "--config", candPath, "--json", p.Audit)
	if code != 10 {
		t.Fatalf("replay exit %d, want 10 (newly blocked)\n%s\n%s", code, out, stderr)
	}
	var pred replayJSON
	if err := json.Unmarshal([]byte(out), &pred); err != nil {
		t.Fatalf("replay --json: %v\n%s", err, out)
	}
	if pred.Decisions != len(first) {
		t.Fatalf("replay judged %d decisions, want %d", pred.Decisions, len(first))
	}

	// Promote the candidate (same listeners) and send the same traffic.
	os.Rename(p.Audit, p.Audit+".1")
	os.WriteFile(p.ConfigPath, []byte(candText), 0o644)
	p.Signal(1) // SIGHUP: reload the policy and reopen the audit file
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(p.Audit); err == nil && strings.Contains(p.Output.String(), "policy reloaded") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	sendReplayTraffic(t, p, up)
	second := auditDecisions(t, p.Audit, "", 2*len(replayHosts))
	if len(second) != len(first) {
		t.Fatalf("%d audit lines in the second run, want %d", len(second), len(first))
	}
	// What actually flipped, per host, request by request.
	actual := map[string][2]int{}
	nb, na := 0, 0
	for i := range first {
		a, b := first[i], second[i]
		if a["host"] != b["host"] || a["protocol"] != b["protocol"] {
			t.Fatalf("runs differ in order at %d: %v vs %v", i, a, b)
		}
		was, now := a["decision"] == "allow", b["decision"] == "allow"
		h := a["host"].(string)
		v := actual[h]
		switch {
		case was && !now:
			v[0]++
			nb++
		case !was && now:
			v[1]++
			na++
		}
		actual[h] = v
	}
	predicted := map[string][2]int{}
	for _, h := range pred.Hosts {
		predicted[h.Host] = [2]int{h.AllowBlock, h.BlockAllow}
	}
	for h, v := range actual {
		if v != predicted[h] {
			t.Errorf("%s: replay predicted %v (allow→block, block→allow), the promoted candidate did %v", h, predicted[h], v)
		}
	}
	for h, v := range predicted {
		if v != actual[h] {
			t.Errorf("%s: replay predicted %v, actual %v", h, v, actual[h])
		}
	}
	if pred.NewlyBlocked != nb || pred.NewlyAllowed != na || nb == 0 || na == 0 {
		t.Fatalf("predicted %d/%d newly blocked/allowed, actual %d/%d\n%s", pred.NewlyBlocked, pred.NewlyAllowed, nb, na, out)
	}

	// Against the promoted policy itself nothing changes (exit 0), also
	// over a gzip-compressed rotated copy.
	gz := p.Audit + ".2.gz"
	writeGzip(t, gz, readFile(t, p.Audit))
	if code, out, stderr := runReplay(t, p, "--config", candPath, gz); code != 0 || !strings.Contains(out, "no request would change") {
		t.Fatalf("replay of the promoted run: exit %d\n%s\n%s", code, out, stderr)
	}
	// --against: live vs candidate re-judged, same prediction.
	livePath := filepath.Join(p.Dir, "live.toml")
	os.WriteFile(livePath, []byte(liveText), 0o644)
	if code, out2, stderr := runReplay(t, p, "--config", candPath, "--against", livePath, "--json", p.Audit+".1"); code != 10 || !sameFlips(t, out, out2) {
		t.Fatalf("--against: exit %d\n%s\n%s", code, out2, stderr)
	}

	// A malformed line is reported with file:line and skipped; --strict stops.
	broken := filepath.Join(p.Dir, "broken.jsonl")
	lines := strings.SplitAfter(readFile(t, p.Audit+".1"), "\n")
	os.WriteFile(broken, []byte(lines[0]+"{not json\n"+strings.Join(lines[1:], "")), 0o644)
	code, _, stderr = runReplay(t, p, "--config", candPath, broken)
	if code != 10 || !strings.Contains(stderr, broken+":2:") {
		t.Fatalf("malformed line: exit %d, stderr %s", code, stderr)
	}
	if code, _, stderr = runReplay(t, p, "--config", candPath, "--strict", broken); code != 2 || !strings.Contains(stderr, broken+":2:") {
		t.Fatalf("--strict: exit %d, stderr %s", code, stderr)
	}
	if code, _, _ = runReplay(t, p, "--config", filepath.Join(p.Dir, "missing.toml"), broken); code != 2 {
		t.Fatalf("missing candidate: exit %d, want 2", code)
	}
}

func sameFlips(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y replayJSON
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return x.NewlyBlocked == y.NewlyBlocked && x.NewlyAllowed == y.NewlyAllowed && len(x.Hosts) == len(y.Hosts)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func appendConfig(t *testing.T, path, text string) {
	t.Helper()
	// [dns] is already present: merge the servers key into it.
	s := readFile(t, path)
	if i := strings.Index(s, "[dns]\n"); i >= 0 && strings.Contains(text, "[dns]\n") {
		extra := strings.TrimPrefix(strings.TrimSpace(text), "[dns]\n")
		s = s[:i+len("[dns]\n")] + extra + "\n" + s[i+len("[dns]\n"):]
	} else {
		s += text
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeGzip(t *testing.T, path, content string) {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(content))
	zw.Close()
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestExecutionAllowListNarrows: an execution registered with
// allow ["up.test"] cannot reach another host-wide-allowed host; another
// execution can.
func TestExecutionAllowListNarrows(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())

	code, narrow := registerWith(t, p, "s1", `{"allow":["up.test"]}`)
	if code != 201 {
		t.Fatalf("register with network: %d %v", code, narrow)
	}
	code, wide := registerWith(t, p, "s1", "")
	if code != 201 {
		t.Fatalf("register: %d", code)
	}
	nb := framingBridge(t, p.HTTP, narrow["token"].(string))
	wb := framingBridge(t, p.HTTP, wide["token"].(string))

	if c := curlVia(t, nb, up.URL("up.test", "/hello")); c != "200" {
		t.Fatalf("narrow execution to up.test: %s", c)
	}
	r := Curl(t, "-i", "-x", "http://"+nb, up.URL("closed.test", "/hello"))
	if !strings.Contains(r.Stdout, " 403 ") || !strings.Contains(r.Stdout, "policy_denied") {
		t.Fatalf("narrow execution reached closed.test:\n%s", r.Stdout)
	}
	if c := Curl(t, "-o", "/dev/null", "-w", "%{http_code}", "-p", "-x", "http://"+nb, fmt.Sprintf("http://closed.test:%d/hello", up.Port)); c.Exit == 0 {
		t.Fatalf("narrow execution's CONNECT to closed.test succeeded: %+v", c)
	}
	if c := curlVia(t, wb, up.URL("closed.test", "/hello")); c != "200" {
		t.Fatalf("other execution to closed.test: %s, want 200", c)
	}
	lines := auditDecisions(t, p.Audit, "closed.test", 3)
	var blocked int
	for _, l := range lines {
		if l["execution_id"] == narrow["execution_id"] {
			if l["decision"] != "deny" || l["reason"] != "policy_denied" || l["source"] != "baseline_policy" || l["level"] != "execution" {
				t.Fatalf("narrow block audited as %v", l)
			}
			blocked++
		} else if l["decision"] != "allow" || l["level"] != "" {
			t.Fatalf("other execution audited as %v", l)
		}
	}
	if blocked != 2 {
		t.Fatalf("%d narrow closed.test blocks audited, want 2", blocked)
	}

	// Trying to widen: accepted, no effect, and the answer says so.
	code, widen := registerWith(t, p, "s1", `{"allow":["denied.test","up.test"],"deny":["closed.test"]}`)
	notes, _ := widen["network_notes"].([]any)
	if code != 201 || len(notes) != 1 || !strings.Contains(fmt.Sprint(notes[0]), "denied.test") {
		t.Fatalf("widening allow: %d %v", code, widen)
	}
	wb2 := framingBridge(t, p.HTTP, widen["token"].(string))
	if c := curlVia(t, wb2, up.URL("denied.test", "/hello")); c != "403" {
		t.Fatalf("a narrower allow widened the deny list: %s", c)
	}
	if l := auditDecisions(t, p.Audit, "denied.test", 1); len(l) != 1 || l[0]["reason"] != "denied" {
		t.Fatalf("host-wide deny should decide: %v", l)
	}
	// Bad input: an invalid pattern is refused with its key.
	if code, bad := registerWith(t, p, "s1", `{"allow":["a/b.test"]}`); code != 400 || !strings.Contains(fmt.Sprint(bad["error"]), "allow[0]") {
		t.Fatalf("invalid pattern: %d %v", code, bad)
	}
	if code, bad := registerWith(t, p, "s1", `{"mode":"wide"}`); code != 400 || !strings.Contains(fmt.Sprint(bad["error"]), "mode") {
		t.Fatalf("invalid mode: %d %v", code, bad)
	}
	if up.Hits() != 2 {
		t.Fatalf("upstream hits %d, want 2", up.Hits())
	}
}

// TestExecutionLimitedModeNarrows: "mode": "limited" on one execution
// blocks its POST (method_not_allowed, level execution) while the proxy
// is in full mode.
func TestExecutionLimitedModeNarrows(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, StdConfig())
	_, lim := registerWith(t, p, "s1", `{"mode":"limited"}`)
	b := framingBridge(t, p.HTTP, lim["token"].(string))
	if c := curlVia(t, b, up.URL("up.test", "/hello")); c != "200" {
		t.Fatalf("GET under limited: %s", c)
	}
	if c := curlVia(t, b, up.URL("up.test", "/echo"), "-X", "POST", "-d", "x"); c != "403" {
		t.Fatalf("POST under an execution's limited mode: %s, want 403", c)
	}
	l := auditDecisions(t, p.Audit, "up.test", 2)
	if len(l) != 2 || l[1]["reason"] != "method_not_allowed" || l[1]["level"] != "execution" {
		t.Fatalf("audit %v", l)
	}
}

// TestSessionDenyBeatsAllowAndAllowSession: a session deny beats a
// host-wide allow and a reviewer's allow_session, closes the session's
// open tunnel, and never reaches the reviewer.
func TestSessionDenyBeatsAllowAndAllowSession(t *testing.T) {
	up := StartUpstream(t, false)
	c := StdConfig()
	c.Approvals = true
	p := StartProxy(t, c)
	_, e := registerWith(t, p, "s9", "")
	b := framingBridge(t, p.HTTP, e["token"].(string))

	// A reviewer allows other.test for the session.
	done := make(chan string, 1)
	go func() {
		r := Curl(t, "-o", "/dev/null", "-w", "%{http_code}", "-x", "http://"+b, up.URL("other.test", "/hello"))
		done <- r.Stdout
	}()
	id := sbxPendingApproval(t, p, "network", "other.test")
	sbxDecide(t, p, id, "allow_session")
	if got := <-done; got != "200" {
		t.Fatalf("allow_session request: %s", got)
	}
	if got := curlVia(t, b, up.URL("other.test", "/hello")); got != "200" {
		t.Fatalf("allow_session cached: %s", got)
	}
	// An open tunnel of the session to up.test.
	tun, err := net.Dial("tcp", b)
	if err != nil {
		t.Fatal(err)
	}
	defer tun.Close()
	fmt.Fprintf(tun, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", up.Port, up.Port)
	br := bufio.NewReader(tun)
	status, _ := br.ReadString('\n')
	if !strings.Contains(status, " 200") {
		t.Fatalf("tunnel: %q", status)
	}
	for {
		l, _ := br.ReadString('\n')
		if l == "\r\n" || l == "" {
			break
		}
	}

	code, body := controlDo(t, p, http.MethodPut, "/v1/sessions/s9/network", `{"deny":["up.test","other.test"]}`)
	if code != 200 {
		t.Fatalf("PUT session network: %d %s", code, body)
	}
	// The open tunnel is closed by the change.
	tun.SetReadDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(tun, "GET /hello HTTP/1.1\r\nHost: up.test\r\n\r\n")
	if _, err := io.ReadAll(br); err != nil && !strings.Contains(err.Error(), "reset") {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the session's open tunnel to up.test stayed open after the session deny")
		}
	}
	if got := curlVia(t, b, up.URL("up.test", "/hello")); got != "403" {
		t.Fatalf("session deny vs host-wide allow: %s, want 403", got)
	}
	if got := curlVia(t, b, up.URL("other.test", "/hello")); got != "403" {
		t.Fatalf("session deny vs allow_session: %s, want 403", got)
	}
	for _, h := range []string{"up.test", "other.test"} {
		ls := auditDecisions(t, p.Audit, h, 1)
		last := ls[len(ls)-1]
		if last["reason"] != "policy_denied" || last["level"] != "session" || last["source"] != "baseline_policy" {
			t.Fatalf("%s audited as %v", h, last)
		}
	}
	if code, body := p.AdminRequest(t, http.MethodGet, "/api/approvals?status=pending", p.Token); code != 200 || strings.Contains(body, "other.test") {
		t.Fatalf("a session-denied host reached the reviewer: %s", body)
	}
	closed := false
	for _, l := range strings.Split(readFile(t, p.Audit), "\n") {
		if strings.Contains(l, `"connection_closed"`) && strings.Contains(l, `"policy_denied"`) && strings.Contains(l, `"up.test"`) {
			closed = true
		}
	}
	if !closed {
		t.Fatal("no connection_closed policy_denied line for the session's tunnel")
	}
	// Another session is unaffected; removing the policy restores it.
	_, other := registerWith(t, p, "s10", "")
	if got := curlVia(t, framingBridge(t, p.HTTP, other["token"].(string)), up.URL("up.test", "/hello")); got != "200" {
		t.Fatalf("another session: %s", got)
	}
	if code, _ := controlDo(t, p, http.MethodDelete, "/v1/sessions/s9/network", ""); code != 204 {
		t.Fatalf("DELETE: %d", code)
	}
	if got := curlVia(t, b, up.URL("up.test", "/hello")); got != "200" {
		t.Fatalf("after DELETE: %s", got)
	}
	if code, body := controlDo(t, p, http.MethodPut, "/v1/sessions/s9/network", `{"deny":["*.["]}`); code != 400 || !strings.Contains(body, "deny[0]") {
		t.Fatalf("bad session policy: %d %s", code, body)
	}
}

// TestCheckExecutionPolicy: `netproxy check --execution-policy FILE`
// reports the level of a narrower block.
func TestCheckExecutionPolicy(t *testing.T) {
	p := WriteProxyConfig(t, StdConfig())
	f := filepath.Join(p.Dir, "exec.json")
	os.WriteFile(f, []byte(`{"allow":["up.test"],"deny":["**.evil.invalid"]}`), 0o644)
	code, out := checkJSON(t, p, "--config", p.ConfigPath, "--execution-policy", f, "closed.test")
	if code != 10 || out["reason"] != "policy_denied" || out["source"] != "baseline_policy" || out["level"] != "execution" {
		t.Fatalf("check closed.test: %d %v", code, out)
	}
	if code, out = checkJSON(t, p, "--config", p.ConfigPath, "--execution-policy", f, "up.test"); code != 0 || out["level"] != "" {
		t.Fatalf("check up.test: %d %v", code, out)
	}
	if code, out = checkJSON(t, p, "--config", p.ConfigPath, "closed.test"); code != 0 {
		t.Fatalf("check without the policy: %d %v", code, out)
	}
	os.WriteFile(f, []byte(`{"allow":["a/b"]}`), 0o644)
	cmd := NetproxyCmd(t, p, "check", "--config", p.ConfigPath, "--execution-policy", f, "up.test")
	outb, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(outb), "allow[0]") {
		t.Fatalf("bad policy file: %d %s", cmd.ProcessState.ExitCode(), outb)
	}
}

// TestExecwrapRunAllowDomain: execwrap passes --allow-domain to netproxy.
func TestExecwrapRunAllowDomain(t *testing.T) {
	p := StartProxy(t, StdConfig())
	up := StartUpstream(t, false)
	dir := sbxDir(t)
	script := fmt.Sprintf(`
code=$(curl -sS -m 10 -o /dev/null -w '%%{http_code}' %s) ; [ "$code" = 200 ] || exit 21
code=$(curl -sS -m 10 -o /dev/null -w '%%{http_code}' %s) ; [ "$code" = 403 ] || exit 22
exit 0`, up.URL("up.test", "/hello"), up.URL("closed.test", "/hello"))
	r, code, stderr := sbxRun(t, p.Env(), dir, "--control", p.Control, "--allow-domain", "up.test", "--deny-domain", "denied.test", "--", "sh", "-c", script)
	if code != 0 || r.ExitCode != 0 {
		t.Fatalf("exit %d/%d (21 up.test not reached, 22 closed.test not blocked): %s %s", code, r.ExitCode, r.Stderr, stderr)
	}
	l := sbxAuditLines(t, p, "closed.test")
	if len(l) != 1 || l[0]["level"] != "execution" || l[0]["execution_id"] != r.ExecutionID {
		t.Fatalf("audit %v", l)
	}
	// The flags need a proxied network.
	_, code, stderr, _ = sbxExec(ExecwrapBin(t), p.Env(), dir, "--control", p.Control, "--sandbox", "danger-full-access", "--network", "host", "--allow-domain", "up.test", "--", "true")
	if code != 2 || !strings.Contains(stderr, "--network proxied") {
		t.Fatalf("--allow-domain with host network: exit %d %s", code, stderr)
	}
	_, code, stderr, _ = sbxExec(ExecwrapBin(t), p.Env(), dir, "--control", p.Control, "--allow-domain", "up.test", "--allow-domain", "a/b", "--", "true")
	if code != 2 || !strings.Contains(stderr, "allow[1]") {
		t.Fatalf("bad --allow-domain: exit %d %s", code, stderr)
	}
}
