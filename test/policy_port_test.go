package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPortScopedEntriesEndToEnd is issue 25 item 1 (SPEC §3.2): an entry
// with a port allows or denies that port (or range) only, through plain
// HTTP, CONNECT and SOCKS5 alike. Before the change "ported.test:PORT"
// silently dropped its port and allowed every port of the host.
func TestPortScopedEntriesEndToEnd(t *testing.T) {
	open := StartUpstream(t, false)  // the allowed port
	other := StartUpstream(t, false) // another port of the same host
	fenced := StartUpstream(t, false)
	p := StartProxy(t, ProxyConfig{
		AllowLocal: true,
		Domains: [][2]string{
			{fmt.Sprintf("ported.test:%d", open.Port), "allow"},
			{"fenced.test", "allow"},
			{fmt.Sprintf("fenced.test:%d-%d", fenced.Port, fenced.Port), "deny"},
		},
		Hosts: map[string][]string{"ported.test": {"127.0.0.1"}, "fenced.test": {"127.0.0.1"}},
	})
	get := func(u string) CurlResult {
		return Curl(t, "-x", "http://"+p.HTTP, "-H", "Accept: application/json", u)
	}
	if r := get(open.URL("ported.test", "/hello")); r.Exit != 0 || r.Stdout != Hello {
		t.Errorf("allowed port: exit %d %q %s", r.Exit, r.Stdout, r.Stderr)
	}
	r := get(other.URL("ported.test", "/hello"))
	if !strings.Contains(r.Stdout, `"reason":"not_allowed"`) || other.Hits() != 0 {
		t.Errorf("another port of a port-scoped host: %q (upstream hits %d)", r.Stdout, other.Hits())
	}
	r = get(fenced.URL("fenced.test", "/hello"))
	if !strings.Contains(r.Stdout, `"reason":"denied"`) || fenced.Hits() != 0 {
		t.Errorf("a port the deny list fences: %q (hits %d)", r.Stdout, fenced.Hits())
	}
	if r := get(other.URL("fenced.test", "/hello")); r.Stdout != Hello {
		t.Errorf("another port of the fenced host: %q %s", r.Stdout, r.Stderr)
	}
	// CONNECT: the tunnel's port is the one judged.
	for port, want := range map[int]string{open.Port: "200", other.Port: "403", fenced.Port: "403"} {
		host := "ported.test"
		if port == fenced.Port {
			host = "fenced.test"
		}
		r := Curl(t, "-x", "http://"+p.HTTP, "-p", "-o", "/dev/null", "-w", "%{http_connect}", fmt.Sprintf("http://%s:%d/hello", host, port))
		if r.Stdout != want {
			t.Errorf("CONNECT %s:%d: %q, want %s", host, port, r.Stdout, want)
		}
	}
	// SOCKS5 likewise.
	if rep, _ := SocksConnect(t, p.SOCKS, nil, 0x01, "ported.test", open.Port); rep != 0 {
		t.Errorf("SOCKS5 allowed port: reply %d", rep)
	}
	if rep, _ := SocksConnect(t, p.SOCKS, nil, 0x01, "ported.test", other.Port); rep != 0x02 {
		t.Errorf("SOCKS5 other port: reply %d, want 2", rep)
	}
	// netproxy check reports the scoped entry as the pattern.
	out, _ := NetproxyCmd(t, p, "check", "--config", p.ConfigPath, "--json", fmt.Sprintf("ported.test:%d", open.Port)).CombinedOutput()
	if !strings.Contains(string(out), fmt.Sprintf(`"pattern": "ported.test:%d"`, open.Port)) {
		t.Errorf("check pattern: %s", out)
	}
}

// TestPortScopedBadPortsAndBroadWarnings: a malformed port is an error
// naming the entry for serve, check and config validate (exit 2); config
// validate warns, one line each and exit 0, about allow entries "*" and
// "**.<tld>".
func TestPortScopedBadPortsAndBroadWarnings(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[network.domains]\n\"a.test:0\" = \"allow\"\n\"b.test:9-3\" = \"deny\"\n\"c.test:https\" = \"allow\"\n"), 0o644)
	for _, args := range [][]string{{"config", "validate", bad}, {"check", "--config", bad, "a.test"}, {"serve", "--config", bad}} {
		cmd := exec.Command(netproxyBin, args...)
		cmd.Env = append(os.Environ(), "NETPROXY_HOME="+dir)
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, cmd.ProcessState.ExitCode(), out)
		}
		for _, w := range []string{`"a.test:0"`, `"b.test:9-3"`, `"c.test:https"`} {
			if !strings.Contains(string(out), w) {
				t.Errorf("%v: does not name %s:\n%s", args, w, out)
			}
		}
	}
	broad := filepath.Join(dir, "broad.toml")
	os.WriteFile(broad, []byte("[network.domains]\n\"*\" = \"allow\"\n\"**.com\" = \"allow\"\n\"**.example.com\" = \"allow\"\n\"api.example.com:443\" = \"allow\"\n"), 0o644)
	cmd := exec.Command(netproxyBin, "config", "validate", broad)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("config validate of a broad but valid file: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0]+lines[1], `"*"`) || !strings.Contains(lines[0]+lines[1], `"**.com"`) || !strings.Contains(stdout.String(), "OK") {
		t.Errorf("want exactly two warnings (\"*\", \"**.com\") and OK; stdout %q stderr %q", stdout.String(), stderr.String())
	}
}
