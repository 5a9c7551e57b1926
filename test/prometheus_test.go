package test

// The observability proof: a real Prometheus server scrapes a real
// `netproxy serve` on loopback, the test drives allowed and denied requests,
// approvals, attribution failures, an upstream error, a tunnel, an exec
// decision report and reloads through it, then evaluates every PromQL
// expression of configs/grafana/netproxy.json and every rule of
// configs/prometheus/alerts.yml through Prometheus' HTTP API.

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
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/netproxy/netproxy/metrics/execreport"
	"github.com/netproxy/netproxy/sandbox/netctl"
)

// promNeedTool finds a binary the test cannot run without; a missing one is
// a failure that says how to install it (scripts/install-test-deps.sh, run
// by `make test`), never a skip.
func promNeedTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found in PATH: run scripts/install-test-deps.sh as root (Debian package prometheus)", name)
	}
	return p
}

func promFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// promProc is a child process in its own process group, killed by PID at
// cleanup.
type promProc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func promStart(t *testing.T, env []string, logPath string, name string, args ...string) *promProc {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &promProc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("--- %s log (tail) ---\n%s", filepath.Base(name), promTail(string(data), 4000))
		}
	})
	return p
}

func (p *promProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func promTail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// promWait polls cond every 100ms until it holds or d passes.
func promWait(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// promAdmin calls the admin API with the bearer token and a JSON body.
func promAdmin(t *testing.T, np *Proxy, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+np.Admin+path, rd)
	req.Header.Set("Authorization", "Bearer "+np.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// promPendingID waits for a pending approval for host and returns its id.
func promPendingID(t *testing.T, np *Proxy, host string) string {
	t.Helper()
	var id string
	promWait(10*time.Second, func() bool {
		code, body := promAdmin(t, np, "GET", "/api/approvals?status=pending", nil)
		if code != 200 {
			return false
		}
		var list struct {
			Approvals []struct {
				ID   any    `json:"id"`
				Host string `json:"host"`
			} `json:"approvals"`
		}
		if json.Unmarshal(body, &list) != nil {
			return false
		}
		for _, a := range list.Approvals {
			if a.Host == host {
				id = fmt.Sprint(a.ID)
				return true
			}
		}
		return false
	})
	if id == "" {
		t.Fatalf("no pending approval for %s within 10s", host)
	}
	return id
}

// promApprove makes a request to host that needs approval, decides it and
// returns the request's final status.
func promApprove(t *testing.T, np *Proxy, rawURL, host, decision string) int {
	t.Helper()
	type reply struct {
		code int
		err  error
	}
	ch := make(chan reply, 1)
	go func() {
		resp, err := np.HTTPClient(false).Get(rawURL)
		if err != nil {
			ch <- reply{0, err}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ch <- reply{resp.StatusCode, nil}
	}()
	id := promPendingID(t, np, host)
	if code, body := promAdmin(t, np, "POST", "/api/approvals/"+url.PathEscape(id)+"/decision", map[string]string{"decision": decision}); code/100 != 2 {
		t.Fatalf("decide %s %s: %d %s", id, decision, code, body)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("request to %s after %s: %v", host, decision, r.err)
		}
		return r.code
	case <-time.After(20 * time.Second):
		t.Fatalf("request to %s still blocked after %s", host, decision)
	}
	return 0
}

// promServer is a running Prometheus.
type promServer struct {
	base string
}

func promStartPrometheus(t *testing.T, target, rulesFile string) *promServer {
	t.Helper()
	bin := promNeedTool(t, "prometheus")
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: netproxy
    static_configs:
      - targets: [%q]
`, rulesFile, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := promFreeAddr(t)
	p := promStart(t, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}, filepath.Join(dir, "prometheus.log"), bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen,
		"--storage.tsdb.retention.time=1h",
	)
	ps := &promServer{base: "http://" + listen}
	ok := promWait(30*time.Second, func() bool {
		if p.exited() {
			return true
		}
		resp, err := http.Get(ps.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if p.exited() || !ok {
		t.Fatalf("prometheus did not become ready on %s", listen)
	}
	return ps
}

type promResult struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query runs an instant query; err is the API's error (bad PromQL etc.).
func (ps *promServer) query(expr string) ([]promResult, error) {
	resp, err := http.PostForm(ps.base+"/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Status    string `json:"status"`
		Error     string `json:"error"`
		ErrorType string `json:"errorType"`
		Data      struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("decode answer (HTTP %d): %w", resp.StatusCode, err)
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("%s: %s", out.ErrorType, out.Error)
	}
	if out.Data.ResultType == "scalar" {
		return []promResult{{}}, nil
	}
	var res []promResult
	if err := json.Unmarshal(out.Data.Result, &res); err != nil {
		return nil, fmt.Errorf("result of type %s: %w", out.Data.ResultType, err)
	}
	return res, nil
}

type promRule struct {
	Name           string `json:"name"`
	Query          string `json:"query"`
	Type           string `json:"type"`
	Health         string `json:"health"`
	LastError      string `json:"lastError"`
	LastEvaluation string `json:"lastEvaluation"`
}

func (ps *promServer) rules(t *testing.T) []promRule {
	t.Helper()
	resp, err := http.Get(ps.base + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data struct {
			Groups []struct {
				File  string     `json:"file"`
				Rules []promRule `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	var all []promRule
	for _, g := range out.Data.Groups {
		all = append(all, g.Rules...)
	}
	return all
}

// grafanaVars replaces the dashboard's Grafana variables with values
// Prometheus can evaluate.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m",
	"$__interval", "15s",
	"$__range", "10m",
	"$job", "netproxy",
	"$instance", ".*",
)

type promDashboardExpr struct {
	panel, refID, expr string
}

func promDashboardExprs(t *testing.T) ([]promDashboardExpr, []string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "configs", "grafana", "netproxy.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("configs/grafana/netproxy.json: %v", err)
	}
	var exprs []promDashboardExpr
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q target %s has an empty expr", p.Title, tg.RefID)
			}
			exprs = append(exprs, promDashboardExpr{p.Title, tg.RefID, grafanaVars.Replace(tg.Expr)})
		}
	}
	var varQueries []string
	for _, v := range dash.Templating.List {
		if v.Type == "query" {
			varQueries = append(varQueries, v.Definition)
		}
	}
	return exprs, varQueries
}

// labelValuesRe parses Grafana's label_values(selector, label).
var labelValuesRe = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

func TestPrometheusScrapesNetproxyAndEvaluatesDashboardAndAlerts(t *testing.T) {
	if testing.Short() {
		t.Log("-short: the Prometheus end-to-end test still runs (it is the proof of issue 6)")
	}
	promNeedTool(t, "prometheus")
	root := repoRoot()

	// Upstreams: the harness origin, and a closed port for an upstream error.
	up := StartUpstream(t, false)
	upPort := up.Port
	closedPort := FreePort(t) // nothing listens here

	cfg := StdConfig()
	cfg.Approvals = true
	for _, h := range []string{"alpha.test", "bravo.test"} {
		cfg.Hosts[h] = []string{"127.0.0.1"}
	}
	cfg.Extra = "[log]\nlevel = \"info\"\nformat = \"json\"\n"
	np := StartProxy(t, cfg)
	goodConfig, err := os.ReadFile(np.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	ps := promStartPrometheus(t, np.Admin, filepath.Join(root, "configs", "prometheus", "alerts.yml"))

	// The target must be scraped before the traffic, so rate() sees increases.
	if !promWait(20*time.Second, func() bool {
		r, err := ps.query(`up{job="netproxy"} == 1`)
		return err == nil && len(r) == 1
	}) {
		t.Fatal("prometheus never scraped netproxy successfully (up == 1)")
	}

	client := np.HTTPClient(true)
	get := func(u string) int {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("GET %s via proxy: %v", u, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// Allowed, denied (a burst big enough for the denial-spike alert
	// expression: > 1/s over 5m), and an upstream failure.
	if c := get(fmt.Sprintf("http://up.test:%d/hello?token=s3cr3tQueryValue", upPort)); c != 200 {
		t.Fatalf("allowed request: %d", c)
	}
	for i := 0; i < 600; i++ {
		if c := get(fmt.Sprintf("http://denied.test:%d/x", upPort)); c != 403 {
			t.Fatalf("denied request: %d", c)
		}
	}
	if c := get(fmt.Sprintf("http://up.test:%d/", closedPort)); c != 502 {
		t.Fatalf("request to a closed upstream port: %d, want 502", c)
	}
	// A CONNECT tunnel relays bytes both ways.
	promTunnel(t, np.HTTP, fmt.Sprintf("up.test:%d", upPort))
	// Approvals: one allowed, one denied by the user reviewer.
	if c := promApprove(t, np, fmt.Sprintf("http://alpha.test:%d/", upPort), "alpha.test", "allow_once"); c != 200 {
		t.Fatalf("approved request: %d", c)
	}
	if c := promApprove(t, np, fmt.Sprintf("http://bravo.test:%d/", upPort), "bravo.test", "deny"); c != 403 {
		t.Fatalf("denied-by-user request: %d", c)
	}
	// Attribution failures: bad magic frames are closed without a reply.
	for i := 0; i < 60; i++ {
		promBadFrame(t, np.HTTP)
	}
	// An execution stays registered (executions_active), and execwrap's
	// exec decision report is counted.
	promRegisterExecution(t, np)
	promReportExec(t, np)
	// Reloads: one failing (bad file), then a good one.
	if err := os.WriteFile(np.ConfigPath, []byte("[network]\nmode = \"sideways\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := promAdmin(t, np, "POST", "/api/reload", nil); code == 200 {
		t.Fatalf("reload of a bad config answered 200: %s", body)
	}
	if err := os.WriteFile(np.ConfigPath, goodConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := promAdmin(t, np, "POST", "/api/reload", nil); code != 200 {
		t.Fatalf("reload of the good config: %d %s", code, body)
	}

	// Wait until the last of the traffic has been scraped twice.
	if !promWait(20*time.Second, func() bool {
		r, err := ps.query(`increase(netproxy_policy_reloads_total{result="ok"}[1m]) > 0`)
		return err == nil && len(r) > 0
	}) {
		t.Fatal("prometheus did not see the reload within 20s")
	}

	// Every dashboard expression: valid PromQL, and data (all panels are
	// tied to the traffic above or to series netproxy always exports).
	exprs, varQueries := promDashboardExprs(t)
	if len(exprs) < 15 {
		t.Fatalf("only %d dashboard expressions", len(exprs))
	}
	for _, e := range exprs {
		promExpectData(t, ps, "dashboard panel "+e.panel+" "+e.refID, e.expr)
	}
	for _, v := range varQueries {
		m := labelValuesRe.FindStringSubmatch(v)
		if m == nil {
			t.Errorf("dashboard variable query %q is not label_values(selector, label)", v)
			continue
		}
		promExpectData(t, ps, "dashboard variable "+v, grafanaVars.Replace(m[1]))
	}

	// Specific values the traffic must have produced.
	promExpectSeries(t, ps, `sum by (host) (increase(netproxy_denied_hosts_total{job="netproxy"}[10m]))`, "host", "denied.test")
	promExpectSeries(t, ps, `sum by (reason) (increase(netproxy_requests_total{decision=~"deny|ask"}[10m])) > 0`, "reason", "denied")
	promExpectSeries(t, ps, `sum by (outcome) (netproxy_approvals_total) > 0`, "outcome", "allow_once")
	promExpectSeries(t, ps, `sum by (outcome) (netproxy_approvals_total) > 0`, "outcome", "deny")
	promExpectSeries(t, ps, `sum by (result) (netproxy_attribution_total) > 0`, "result", "bad_magic")
	promExpectSeries(t, ps, `sum by (requirement) (netproxy_exec_decisions_total) > 0`, "requirement", "forbidden")
	promExpectSeries(t, ps, `sum by (direction) (netproxy_bytes_total) > 0`, "direction", "down")
	promExpectSeries(t, ps, `sum by (kind) (netproxy_upstream_errors_total) > 0`, "kind", "")
	promExpectSeries(t, ps, `netproxy_executions_active > 0`, "", "")
	promExpectSeries(t, ps, `netproxy_approval_wait_seconds_count > 0`, "", "")

	// Every rule loaded by Prometheus: evaluated without error, its query
	// valid; recording rules and the alerts the traffic triggers have data.
	rules := ps.rules(t)
	if want := promtoolRuleCount(t, root); len(rules) != want {
		t.Fatalf("prometheus loaded %d rules, promtool counts %d", len(rules), want)
	}
	tiedAlerts := map[string]bool{"NetproxyDenialSpike": true, "NetproxyPolicyReloadFailed": true, "NetproxyAttributionFailures": true}
	for _, r := range rules {
		if _, err := ps.query(r.Query); err != nil {
			t.Errorf("rule %s: query %q: %v", r.Name, r.Query, err)
			continue
		}
		if r.Type == "recording" || tiedAlerts[r.Name] {
			promExpectData(t, ps, "rule "+r.Name, r.Query)
		}
	}
	promWait(10*time.Second, func() bool {
		for _, r := range ps.rules(t) {
			if r.Health != "ok" {
				return false
			}
		}
		return true
	})
	for _, r := range ps.rules(t) {
		if r.Health != "ok" {
			t.Errorf("rule %s health %q: %s", r.Name, r.Health, r.LastError)
		}
	}
	// The reload failure alert has no `for`: it must be firing now.
	if !promWait(10*time.Second, func() bool {
		res, err := ps.query(`ALERTS{alertname="NetproxyPolicyReloadFailed", alertstate="firing"}`)
		return err == nil && len(res) > 0
	}) {
		t.Error("NetproxyPolicyReloadFailed is not firing after a failed reload")
	}

	// The audit never holds the query string or the admin token.
	raw, err := os.ReadFile(np.Audit)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("s3cr3tQueryValue")) || bytes.Contains(raw, []byte(np.Token)) {
		t.Fatal("the audit file holds a query string or the admin token")
	}
	if !bytes.Contains(raw, []byte(`"event":"approval_resolved"`)) || !bytes.Contains(raw, []byte(`"event":"exec_decision"`)) {
		t.Fatalf("audit lacks approval_resolved or exec_decision lines:\n%s", promTail(string(raw), 2000))
	}

	// Structured logs: one JSON line per blocked request with its reason and
	// execution id field, and never the query string.
	logs := np.Output.String()
	if strings.Contains(logs, "s3cr3tQueryValue") || strings.Contains(logs, np.Token) {
		t.Fatal("the netproxy log holds a query string or the admin token")
	}
	blocked := 0
	for _, line := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != "request blocked" {
			continue
		}
		if _, ok := m["execution_id"]; !ok || m["reason"] == nil || m["reason"] == "" {
			t.Fatalf("blocked-request log line without reason/execution_id: %s", line)
		}
		if m["host"] == "denied.test" && m["reason"] == "denied" {
			blocked++
		}
	}
	if blocked != 600 {
		t.Errorf("%d 'request blocked' log lines for denied.test, want 600 (one per blocked request)", blocked)
	}
}

// promExpectData polls expr until it returns at least one sample; a query
// error fails at once.
func promExpectData(t *testing.T, ps *promServer, what, expr string) {
	t.Helper()
	var lastErr error
	ok := promWait(15*time.Second, func() bool {
		res, err := ps.query(expr)
		if err != nil {
			lastErr = err
			return true
		}
		return len(res) > 0
	})
	if lastErr != nil {
		t.Errorf("%s: query %q failed: %v", what, expr, lastErr)
		return
	}
	if !ok {
		t.Errorf("%s: query %q returned no data", what, expr)
	}
}

// promExpectSeries polls expr until a sample has label == value (label ""
// means any sample).
func promExpectSeries(t *testing.T, ps *promServer, expr, label, value string) {
	t.Helper()
	var last []promResult
	var lastErr error
	ok := promWait(15*time.Second, func() bool {
		last, lastErr = ps.query(expr)
		if lastErr != nil {
			return false
		}
		for _, r := range last {
			if label == "" || value == "" || r.Metric[label] == value {
				return true
			}
		}
		return false
	})
	if !ok {
		t.Errorf("query %q: want a sample with %s=%q, got %v (err %v)", expr, label, value, last, lastErr)
	}
}

// promtoolRuleCount runs `promtool check rules` on alerts.yml (which must
// pass) and returns the number of rules it found.
func promtoolRuleCount(t *testing.T, root string) int {
	t.Helper()
	out, err := exec.Command(promNeedTool(t, "promtool"), "check", "rules", filepath.Join(root, "configs", "prometheus", "alerts.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`SUCCESS: (\d+) rules found`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("promtool check rules output has no rule count:\n%s", out)
	}
	var n int
	fmt.Sscan(string(m[1]), &n)
	return n
}

// promTunnel opens a CONNECT tunnel to target and fetches / through it.
func promTunnel(t *testing.T, proxyAddr, target string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target)
	inner, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET through the tunnel: %v", err)
	}
	io.Copy(io.Discard, inner.Body)
	inner.Body.Close()
}

// promBadFrame sends an attribution frame with a bad magic; the proxy must
// close the connection without a reply.
func promBadFrame(t *testing.T, proxyAddr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte("\x00BADMAGI\x00\x04abcdGET / HTTP/1.1\r\n\r\n"))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("bad frame: read %d bytes, err %v; want the connection closed without a reply", n, err)
	}
}

func promRegisterExecution(t *testing.T, np *Proxy) {
	t.Helper()
	body := `{"session_id":"s1","environment_id":"e1","command":["true"],"cwd":"/"}`
	resp, err := np.ControlClient().Post("http://netproxy/v1/executions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("register execution: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 201 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("register execution: %d %s", resp.StatusCode, b)
	}
}

func promReportExec(t *testing.T, np *Proxy) {
	t.Helper()
	// Through execwrap's own control client, as execwrap reports it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := netctl.New(np.Control).ReportExecDecision(ctx, execreport.Report{
		Requirement: execreport.Forbidden, Source: "prefix", Reason: "blocked by rule",
		SessionID: "s1", EnvironmentID: "e1", Command: []string{"rm", "-rf", "/"},
	})
	if err != nil {
		t.Fatalf("report exec decision: %v", err)
	}
}

// TestAuditReopenOnSIGHUP: after the audit file is renamed (rotation) and
// netproxy gets SIGHUP, new decisions go to a fresh file at the same path.
func TestAuditReopenOnSIGHUP(t *testing.T) {
	up := StartUpstream(t, false)
	np := StartProxy(t, StdConfig())
	client := np.HTTPClient(false)
	get := func(host string) {
		resp, err := client.Get(up.URL(host, "/hello"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// network_decision lines only: an allowed request also ends with a
	// connection_end line (SPEC §7.5).
	countLines := func(path, host string) int {
		data, _ := os.ReadFile(path)
		n := 0
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, `"event":"network_decision"`) && strings.Contains(l, `"host":"`+host+`"`) {
				n++
			}
		}
		return n
	}
	get("up.test")
	if !promWait(5*time.Second, func() bool { return countLines(np.Audit, "up.test") == 1 }) {
		t.Fatal("first decision not in the audit file")
	}
	rotated := np.Audit + ".1"
	if err := os.Rename(np.Audit, rotated); err != nil {
		t.Fatal(err)
	}
	np.Signal(syscall.SIGHUP)
	if !promWait(5*time.Second, func() bool { _, err := os.Stat(np.Audit); return err == nil }) {
		t.Fatal("SIGHUP did not reopen the audit file at its path")
	}
	get("denied.test")
	if !promWait(5*time.Second, func() bool { return countLines(np.Audit, "denied.test") == 1 }) {
		t.Fatalf("decision after SIGHUP not in the new audit file")
	}
	if countLines(rotated, "denied.test") != 0 || countLines(rotated, "up.test") != 1 {
		t.Fatal("the rotated file changed after SIGHUP")
	}
	// Shutdown flushes: a decision right before SIGTERM is on disk after exit.
	get("other.test")
	np.Signal(syscall.SIGTERM)
	np.WaitExit(t, 20*time.Second)
	if countLines(np.Audit, "other.test") != 1 {
		t.Fatal("the last decision before SIGTERM is not in the audit file")
	}
}

// TestPrometheusRulesPassPromtool runs promtool's static check and the rule
// unit tests (configs/prometheus/alerts_test.yml) that prove each alert
// fires on its condition and stays quiet otherwise.
func TestPrometheusRulesPassPromtool(t *testing.T) {
	promtool := promNeedTool(t, "promtool")
	dir := filepath.Join(repoRoot(), "configs", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
		{"check", "config", "prometheus.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
