package test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Egress budgets (SPEC §3.12, issue 25 item 4), with real curl through an
// attributing relay (the frame written first on every connection, as
// execwrap's bridge does).

const mib = 1 << 20

// budgetOrigin is an origin for the budget tests: /5m streams 5 MiB,
// /sink reads the whole body and answers its length, anything else
// answers "ok". TLS with a throw-away certificate when useTLS.
func budgetOrigin(t *testing.T, useTLS bool) int {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/5m":
			w.Header().Set("Content-Length", strconv.Itoa(5*mib))
			chunk := make([]byte, 32<<10)
			for sent := 0; sent < 5*mib; sent += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/sink":
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, n)
		default:
			io.WriteString(w, "ok")
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if useTLS {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}})
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return port
}

// frameRelay listens on 127.0.0.1 and relays every connection to target
// after writing token's attribution frame: curl pointed at it is an
// attributed client of the proxy.
func frameRelay(t *testing.T, target, token string) string {
	t.Helper()
	port := rawServer(t, func(c net.Conn) {
		up, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			return
		}
		defer up.Close()
		if _, err := up.Write(Frame(token)); err != nil {
			return
		}
		done := make(chan struct{}, 2)
		go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
		go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
		<-done
		<-done
	})
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// registerBudget registers an execution with an optional "budgets" object
// and returns the registration and the raw answer.
func registerBudget(t *testing.T, p *Proxy, budgets string) (Registration, map[string]any) {
	t.Helper()
	body := `{"session_id":"s-budget","environment_id":"e-budget","command":["curl"]`
	if budgets != "" {
		body += `,"budgets":` + budgets
	}
	body += "}"
	resp, err := p.ControlClient().Post("http://netproxy/v1/executions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r Registration
	var m map[string]any
	if resp.StatusCode != 201 || json.Unmarshal(raw, &r) != nil || json.Unmarshal(raw, &m) != nil {
		t.Fatalf("register %s: %d %s", body, resp.StatusCode, raw)
	}
	return r, m
}

// usageOf is GET /v1/executions/{id}'s "usage".
func usageOf(t *testing.T, p *Proxy, id string) map[string]float64 {
	t.Helper()
	resp, err := p.ControlClient().Get("http://netproxy/v1/executions/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Usage map[string]float64 `json:"usage"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&v) != nil || v.Usage == nil {
		t.Fatalf("GET execution %s: %d, no usage", id, resp.StatusCode)
	}
	return v.Usage
}

func budgetProxy(t *testing.T, budgets string) *Proxy {
	cfg := StdConfig()
	cfg.Extra = "[budgets]\n" + budgets + "\n"
	return StartProxy(t, cfg)
}

// closedFor waits for a connection_closed audit line with reason
// budget_exceeded of execution id.
func closedFor(t *testing.T, p *Proxy, id string) {
	t.Helper()
	waitAudit(t, p, "connection_closed", 1, func(m map[string]any) bool {
		return m["reason"] == "budget_exceeded" && m["execution_id"] == id
	})
}

// TestBudgetBytesIn: a 5 MiB download is cut at a 1 MiB bytes_in budget
// over plain HTTP, a CONNECT tunnel and SOCKS5 (each its own execution);
// curl sees a cut connection having received at most 1 MiB and one copy
// slice; the close is audited and counted; the execution's next request is
// refused with budget_exceeded.
func TestBudgetBytesIn(t *testing.T) {
	plain := budgetOrigin(t, false)
	secure := budgetOrigin(t, true)
	p := budgetProxy(t, `bytes_in = "1MiB"`)
	for _, tc := range []struct {
		name string
		args func(reg Registration) []string
	}{
		{"http", func(reg Registration) []string {
			return []string{"-x", "http://" + frameRelay(t, p.HTTP, reg.Token), fmt.Sprintf("http://up.test:%d/5m", plain)}
		}},
		{"connect", func(reg Registration) []string {
			return []string{"-k", "-x", "http://" + frameRelay(t, p.HTTP, reg.Token), fmt.Sprintf("https://up.test:%d/5m", secure)}
		}},
		{"socks5", func(reg Registration) []string {
			return []string{"--socks5-hostname", frameRelay(t, p.SOCKS, reg.Token), fmt.Sprintf("http://up.test:%d/5m", plain)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := metricValue(t, p, "netproxy_budget_exceeded_total", `{limit="bytes_in"}`)
			reg, _ := registerBudget(t, p, "")
			out := filepath.Join(t.TempDir(), "body")
			r := Curl(t, append([]string{"-o", out}, tc.args(reg)...)...)
			st, err := os.Stat(out)
			var got int64
			if err == nil {
				got = st.Size()
			}
			if r.Exit == 0 || got >= 5*mib {
				t.Fatalf("curl finished the 5 MiB download (exit %d, %d bytes): the budget did not cut it", r.Exit, got)
			}
			// One copy slice (256 KiB) plus curl's and the sockets' buffers
			// may be past the proxy's count; the relay itself stops at the
			// limit (+1 byte).
			if got > mib+256<<10 {
				t.Fatalf("curl received %d bytes, want ≤ 1 MiB + one slice", got)
			}
			closedFor(t, p, reg.ExecutionID)
			if after := metricValue(t, p, "netproxy_budget_exceeded_total", `{limit="bytes_in"}`); after < before+1 {
				t.Fatalf("netproxy_budget_exceeded_total{limit=bytes_in} %v → %v", before, after)
			}
			if u := usageOf(t, p, reg.ExecutionID); u["bytes_in"] <= mib || u["requests"] != 1 || u["hosts"] != 1 {
				t.Fatalf("usage %v", u)
			}
			// New work of this execution is refused.
			r = Curl(t, "-i", "-x", "http://"+frameRelay(t, p.HTTP, reg.Token), fmt.Sprintf("http://up.test:%d/hello", plain))
			if !strings.Contains(r.Stdout, " 403 ") || !strings.Contains(strings.ToLower(r.Stdout), "x-proxy-error: blocked-by-budget") || !strings.Contains(r.Stdout, `"reason":"budget_exceeded"`) {
				t.Fatalf("after the cut: %q", r.Stdout)
			}
		})
	}
	// An unattributed client has no budget.
	r := Curl(t, "-o", filepath.Join(t.TempDir(), "body"), "-w", "%{size_download}", "-x", "http://"+p.HTTP, fmt.Sprintf("http://up.test:%d/5m", plain))
	if r.Exit != 0 || r.Stdout != strconv.Itoa(5*mib) {
		t.Fatalf("unattributed download: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
}

// TestBudgetBytesOut: an upload past bytes_out is cut, plain HTTP and
// through a CONNECT tunnel.
func TestBudgetBytesOut(t *testing.T) {
	plain := budgetOrigin(t, false)
	secure := budgetOrigin(t, true)
	p := budgetProxy(t, `bytes_out = "256KiB"`)
	file := filepath.Join(t.TempDir(), "up")
	if err := os.WriteFile(file, make([]byte, 2*mib), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, u := range map[string]string{
		"http":    fmt.Sprintf("http://up.test:%d/sink", plain),
		"connect": fmt.Sprintf("https://up.test:%d/sink", secure),
	} {
		t.Run(name, func(t *testing.T) {
			before := metricValue(t, p, "netproxy_budget_exceeded_total", `{limit="bytes_out"}`)
			reg, _ := registerBudget(t, p, "")
			r := Curl(t, "-k", "-x", "http://"+frameRelay(t, p.HTTP, reg.Token), "--data-binary", "@"+file, u)
			if r.Exit == 0 && r.Stdout == strconv.Itoa(2*mib) {
				t.Fatalf("the 2 MiB upload passed a 256 KiB bytes_out budget")
			}
			closedFor(t, p, reg.ExecutionID)
			if after := metricValue(t, p, "netproxy_budget_exceeded_total", `{limit="bytes_out"}`); after < before+1 {
				t.Fatalf("netproxy_budget_exceeded_total{limit=bytes_out} %v → %v", before, after)
			}
			if u := usageOf(t, p, reg.ExecutionID); u["bytes_out"] <= 256<<10 || u["bytes_out"] > 256<<10+256<<10 {
				t.Fatalf("usage %v", u)
			}
		})
	}
}

// blockedBudget checks a curl -i answer is the JSON budget block.
func blockedBudget(t *testing.T, out string) {
	t.Helper()
	i := strings.Index(out, "\r\n\r\n")
	if !strings.Contains(out, " 403 ") || i < 0 || !strings.Contains(strings.ToLower(out[:i]), "x-proxy-error: blocked-by-budget") {
		t.Fatalf("want a 403 blocked-by-budget, got %q", out)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(out[i+4:]), &body); err != nil {
		t.Fatalf("block body %q: %v", out[i+4:], err)
	}
	if body["reason"] != "budget_exceeded" || body["source"] != "proxy_state" || body["decision"] != "deny" || body["status"] != "blocked" || body["message"] == "" {
		t.Fatalf("block body %v", body)
	}
}

// TestBudgetRequestsAndHosts: requests = 3 refuses the 4th with the JSON
// block; hosts = 1 refuses a second host but not the first again.
func TestBudgetRequestsAndHosts(t *testing.T) {
	plain := budgetOrigin(t, false)
	p := budgetProxy(t, "requests = 3\nhosts = 1")
	reg, _ := registerBudget(t, p, "")
	relay := "http://" + frameRelay(t, p.HTTP, reg.Token)
	get := func(host string) CurlResult {
		return Curl(t, "-i", "-x", relay, fmt.Sprintf("http://%s:%d/hello", host, plain))
	}
	if r := get("up.test"); !strings.Contains(r.Stdout, " 200 ") {
		t.Fatalf("1st: %q", r.Stdout)
	}
	blockedBudget(t, get("closed.test").Stdout) // a second host
	for i := 2; i <= 3; i++ {
		if r := get("up.test"); !strings.Contains(r.Stdout, " 200 ") {
			t.Fatalf("request %d: %q", i, r.Stdout)
		}
	}
	blockedBudget(t, get("up.test").Stdout) // the 4th
	if u := usageOf(t, p, reg.ExecutionID); u["requests"] != 3 || u["hosts"] != 1 || u["bytes_in"] != 6 {
		t.Fatalf("usage %v", u)
	}
	waitAudit(t, p, "network_decision", 2, func(m map[string]any) bool {
		return m["reason"] == "budget_exceeded" && m["execution_id"] == reg.ExecutionID
	})
	if v := metricValue(t, p, "netproxy_budget_exceeded_total", `{limit="requests"}`); v != 1 {
		t.Fatalf("requests blocks counted %v", v)
	}
	if v := metricValue(t, p, "netproxy_budget_exceeded_total", `{limit="hosts"}`); v != 1 {
		t.Fatalf("hosts blocks counted %v", v)
	}
	// SOCKS5: the CONNECT is a request too; past the limit it is refused
	// (0x02) before any upstream byte.
	reg2, _ := registerBudget(t, p, `{"requests":1}`)
	socks := frameRelay(t, p.SOCKS, reg2.Token)
	if r := Curl(t, "--socks5-hostname", socks, fmt.Sprintf("http://up.test:%d/hello", plain)); r.Exit != 0 || r.Stdout != "ok" {
		t.Fatalf("SOCKS5 1st: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	// 0x02: not allowed by ruleset (SPEC §3.7).
	if r := Curl(t, "--socks5-hostname", socks, fmt.Sprintf("http://up.test:%d/hello", plain)); r.Exit == 0 || !strings.Contains(r.Stderr, "(2)") {
		t.Fatalf("SOCKS5 2nd: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
}

// TestBudgetPerExecution: POST /v1/executions narrows the host-wide
// budget (a wider value is clamped with a note), GET reports the usage and
// the events stream carries it.
func TestBudgetPerExecution(t *testing.T) {
	plain := budgetOrigin(t, false)
	p := budgetProxy(t, "requests = 5")
	_, m := registerBudget(t, p, `{"requests":10,"bytes_in":"1MiB"}`)
	notes, _ := m["budget_notes"].([]any)
	if len(notes) != 1 || !strings.Contains(fmt.Sprint(notes[0]), "budgets.requests") {
		t.Fatalf("budget_notes %v", m["budget_notes"])
	}
	resp, err := p.ControlClient().Post("http://netproxy/v1/executions", "application/json",
		strings.NewReader(`{"session_id":"s","environment_id":"e","command":["x"],"budgets":{"bytes_in":"lots"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("a bad size registered: %d", resp.StatusCode)
	}

	reg, _ := registerBudget(t, p, `{"requests":2}`)
	evResp, err := p.ControlClient().Get("http://netproxy/v1/executions/" + reg.ExecutionID + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer evResp.Body.Close()
	relay := "http://" + frameRelay(t, p.HTTP, reg.Token)
	for i := 1; i <= 2; i++ {
		if r := Curl(t, "-x", relay, fmt.Sprintf("http://up.test:%d/hello", plain)); r.Stdout != "ok" {
			t.Fatalf("request %d: %q", i, r.Stdout)
		}
	}
	blockedBudget(t, Curl(t, "-i", "-x", relay, fmt.Sprintf("http://up.test:%d/hello", plain)).Stdout)
	if u := usageOf(t, p, reg.ExecutionID); u["requests"] != 2 || u["bytes_in"] != 4 {
		t.Fatalf("usage %v", u)
	}
	// The events: each decision with the usage after it.
	sc := bufio.NewScanner(evResp.Body)
	var last map[string]any
	for n := 0; n < 3 && sc.Scan(); n++ {
		json.Unmarshal(sc.Bytes(), &last)
		if last["usage"] == nil {
			t.Fatalf("event without usage: %s", sc.Text())
		}
	}
	if last["reason"] != "budget_exceeded" || last["usage"].(map[string]any)["requests"] != 2.0 {
		t.Fatalf("last event %v", last)
	}
}

// TestBudgetInterceptedTunnel: in limited mode with MITM every request
// inside the tunnel is a request: the CONNECT and two GETs use a budget of
// 3, the third GET inside the same tunnel gets the JSON block.
func TestBudgetInterceptedTunnel(t *testing.T) {
	up := StartUpstream(t, true)
	cfg := StdConfig()
	cfg.Mode = "limited"
	cfg.Extra = "[mitm]\nenabled = true\nca_cert = \"ca.pem\"\nca_key = \"ca-key.pem\"\nupstream_ca = \"upstream.pem\"\n\n[budgets]\nrequests = 3\n"
	p := WriteProxyConfig(t, cfg)
	writeMITMFiles(t, p.Dir, up)
	p.Start(t)
	reg, _ := registerBudget(t, p, "")
	u := up.URL("up.test", "/hello")
	r := Curl(t, "--cacert", filepath.Join(p.Dir, "ca.pem"), "-x", "http://"+frameRelay(t, p.HTTP, reg.Token),
		"-w", "\n%{http_code}|%{num_connects}\n", u, u, u)
	parts := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if r.Exit != 0 || len(parts) != 6 || parts[1] != "200|1" || parts[3] != "200|0" || !strings.HasPrefix(parts[5], "403|0") ||
		!strings.Contains(parts[4], `"reason":"budget_exceeded"`) {
		t.Fatalf("three GETs in one intercepted tunnel: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	if us := usageOf(t, p, reg.ExecutionID); us["requests"] != 3 || us["hosts"] != 1 {
		t.Fatalf("usage %v", us)
	}
	waitAudit(t, p, "network_decision", 1, func(m map[string]any) bool {
		return m["reason"] == "budget_exceeded" && m["protocol"] == "https" && m["execution_id"] == reg.ExecutionID
	})
}
