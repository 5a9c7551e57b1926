package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkJSON runs `netproxy check --config F --json ARGS...` with p's
// environment ($NETPROXY_HOME) and returns its exit code and JSON.
func checkJSON(t *testing.T, p *Proxy, args ...string) (int, map[string]any) {
	t.Helper()
	cmd := NetproxyCmd(t, p, append([]string{"check", "--config", p.ConfigPath, "--json"}, args...)...)
	out, _ := cmd.Output()
	var m map[string]any
	json.Unmarshal(out, &m)
	return cmd.ProcessState.ExitCode(), m
}

// TestCheckAgreesWithServe is issue 11 item 8: `netproxy check` builds the
// policy exactly as serve does — with the persisted network_rule
// amendments of $NETPROXY_HOME/rules and with MITM admission.
func TestCheckAgreesWithServe(t *testing.T) {
	up := StartUpstream(t, true)
	cfg := StdConfig()
	cfg.Mode = "limited"
	cfg.Approvals = true
	// up.test (the name the upstream's certificate holds) is on no list:
	// only the persisted allow_always lets it through.
	cfg.Domains = [][2]string{{"closed.test", "allow"}, {"denied.test", "deny"}}
	cfg.Extra = "[mitm]\nenabled = true\nca_cert = \"ca.pem\"\nca_key = \"ca-key.pem\"\nupstream_ca = \"upstream.pem\"\n"
	p := WriteProxyConfig(t, cfg)
	writeMITMFiles(t, p.Dir, up)
	// An allow_always and a deny_always a reviewer gave earlier.
	rules := filepath.Join(p.Home, "rules")
	os.MkdirAll(rules, 0o700)
	os.WriteFile(filepath.Join(rules, "default.rules"), []byte(
		"network_rule(host=\"up.test\", protocol=\"https\", decision=\"allow\", justification=\"approved\")\n"+
			"network_rule(host=\"closed.test\", protocol=\"https\", decision=\"deny\", justification=\"refused\")\n"), 0o600)
	p.Start(t)
	ca := filepath.Join(p.Dir, "ca.pem")

	// serve: the amended host is allowed (through MITM in limited mode),
	// the denied one refused.
	r := Curl(t, "-x", "http://"+p.HTTP, "--cacert", ca, up.URL("up.test", "/hello"))
	if r.Exit != 0 || r.Stdout != Hello {
		t.Fatalf("serve, allow_always host: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	r = Curl(t, "-x", "http://"+p.HTTP, "--cacert", ca, "-o", "/dev/null", "-w", "%{http_connect}", up.URL("closed.test", "/hello"))
	if r.Stdout != "403" {
		t.Fatalf("serve, deny_always host: CONNECT %q %s", r.Stdout, r.Stderr)
	}

	// check says the same.
	for _, c := range []struct {
		host, decision, reason, source string
		exit                           int
	}{
		{"up.test:443", "allow", "", "baseline_policy", 0},
		{"closed.test:443", "deny", "denied", "baseline_policy", 10},
		{"unknown.test:443", "ask", "not_allowed", "decider", 11},
	} {
		code, m := checkJSON(t, p, "--protocol", "https", c.host)
		if code != c.exit || m["decision"] != c.decision || m["source"] != c.source || (c.reason != "" && m["reason"] != c.reason) {
			t.Errorf("check %s: exit %d %v, want exit %d %s %s %s", c.host, code, m, c.exit, c.decision, c.reason, c.source)
		}
	}
	// Without [mitm] check says mitm_required, as serve does.
	raw, _ := os.ReadFile(p.ConfigPath)
	noMITM := strings.Replace(string(raw), "[mitm]\nenabled = true", "[mitm]\nenabled = false", 1)
	os.WriteFile(p.ConfigPath, []byte(noMITM), 0o644)
	if code, m := checkJSON(t, p, "--protocol", "https", "up.test:443"); code != 10 || m["reason"] != "mitm_required" {
		t.Errorf("check without mitm: exit %d %v", code, m)
	}
}
