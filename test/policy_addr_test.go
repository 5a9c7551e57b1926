package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAddressEntriesEndToEnd is issue 11 item 5: IP and CIDR entries in
// both lists, through plain HTTP, CONNECT and SOCKS5. A deny entry catches
// the literal and every name answered there; an allow-list prefix is the
// explicit exemption from the local guard (no allow_local_binding).
func TestAddressEntriesEndToEnd(t *testing.T) {
	up := StartUpstream(t, false)
	p := StartProxy(t, ProxyConfig{
		Domains: [][2]string{
			{"*", "allow"}, {"127.0.0.0/8", "allow"}, {"127.0.0.2", "deny"},
			{"169.254.169.254", "deny"}, {"fd00::/8", "deny"},
		},
		Hosts: map[string][]string{
			"registry.test": {"127.0.0.1"}, "meta.test": {"169.254.169.254"},
			"two.test": {"127.0.0.2"}, "ula.test": {"fd00::1"},
		},
	})
	deny := func(what string, args ...string) {
		t.Helper()
		r := Curl(t, append([]string{"-x", "http://" + p.HTTP}, args...)...)
		if !strings.Contains(r.Stdout, `"reason":"denied"`) {
			t.Errorf("%s: want denied, got %q %s", what, r.Stdout, r.Stderr)
		}
	}
	deny("metadata literal", "http://169.254.169.254/latest/meta-data/")
	deny("metadata by name", "http://meta.test/")
	deny("a denied address inside an allowed prefix", up.URL("two.test", "/"))
	deny("IPv6 prefix by name", "http://ula.test/")
	deny("mapped spelling of the metadata address", "http://[::ffff:169.254.169.254]/")

	r := Curl(t, "-x", "http://"+p.HTTP, "-o", "/dev/null", "-w", "%{http_connect}", "https://meta.test/")
	if r.Stdout != "403" {
		t.Errorf("CONNECT to a name in a denied prefix: %q", r.Stdout)
	}
	for _, h := range []string{"meta.test", "169.254.169.254", "two.test"} {
		if rep, _ := SocksConnect(t, p.SOCKS, nil, 0x01, h, 80); rep != 0x02 {
			t.Errorf("SOCKS5 %s: reply %d, want 2", h, rep)
		}
	}
	// The allow-list prefix: a name answered inside it and a literal in it.
	for _, u := range []string{up.URL("registry.test", "/hello"), up.URL("127.0.0.1", "/hello")} {
		r := Curl(t, "-x", "http://"+p.HTTP, u)
		if r.Exit != 0 || r.Stdout != Hello {
			t.Errorf("%s inside an allow-list prefix: exit %d %q %s", u, r.Exit, r.Stdout, r.Stderr)
		}
	}
	if rep, c := SocksConnect(t, p.SOCKS, nil, 0x01, "registry.test", up.Port); rep != 0 {
		t.Errorf("SOCKS5 registry.test: reply %d", rep)
	} else {
		fmt.Fprintf(c, "GET /hello HTTP/1.0\r\nHost: registry.test\r\n\r\n")
	}
}

// TestBadAddressEntriesNameFileLineAndKey: a malformed CIDR, a CIDR with a
// port, a dns.servers entry that is not ip:port — serve and check refuse
// to start (exit 2), naming file:line and key; a domain file names its line.
func TestBadAddressEntriesNameFileLineAndKey(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "deny.txt"), []byte("# metadata\n169.254.169.254\n10.0.0.0/33\n"), 0o644)
	cfg := filepath.Join(dir, "netproxy.toml")
	os.WriteFile(cfg, []byte("[network.domains]\n\"ok.test\" = \"allow\"\n\"10.1.0.0/16:0\" = \"allow\"\n\n[[network.domain_files]]\npath = \"deny.txt\"\ndecision = \"deny\"\n\n[dns]\nservers = [\"resolver.example\"]\n"), 0o644)
	for _, args := range [][]string{{"check", "--config", cfg, "ok.test"}, {"config", "validate", cfg}, {"serve", "--config", cfg}} {
		cmd := exec.Command(netproxyBin, args...)
		cmd.Env = append(os.Environ(), "NETPROXY_HOME="+dir)
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, cmd.ProcessState.ExitCode(), out)
		}
		want := []string{cfg + ":3", `network.domains."10.1.0.0/16:0"`, "port", cfg + ":10", "dns.servers[0]"}
		if args[0] != "serve" && args[0] != "check" {
			want = append(want, filepath.Join(dir, "deny.txt")+":3")
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%v: output does not name %q:\n%s", args, w, out)
			}
		}
	}
}
