package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netproxy/netproxy/configs"
)

func write(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultMatchesSpec(t *testing.T) {
	t.Setenv("NETPROXY_HOME", "/srv/np")
	c := Default()
	if c.Listen.HTTP != "127.0.0.1:3128" || c.Listen.SOCKS5 != "127.0.0.1:1080" || c.Listen.Admin != "127.0.0.1:9091" {
		t.Errorf("listen defaults: %+v", c.Listen)
	}
	if c.Control.Socket != "/srv/np/control.sock" || c.Audit.Path != "/srv/np/audit.jsonl" {
		t.Errorf("home paths: %q %q", c.Control.Socket, c.Audit.Path)
	}
	if !c.Network.Enabled || c.Network.Mode != "full" || c.Network.AllowLocalBinding || len(c.Network.Domains) != 0 || len(c.Network.DomainFiles) != 0 {
		t.Errorf("network defaults: %+v", c.Network)
	}
	if !c.Approvals.Enabled || c.Approvals.Reviewer != "user" || c.Approvals.Policy != "on-request" || c.Approvals.Timeout.Duration != 120*time.Second ||
		c.Approvals.MaxPending != 1000 || c.Approvals.MaxPendingPerSession != 100 || c.Approvals.ClientWait.Duration != 25*time.Second {
		t.Errorf("approvals defaults: %+v", c.Approvals)
	}
	if c.DNS.Timeout.Duration != 2*time.Second || c.Limits.MaxConnections != 10000 || c.Limits.IdleTimeout.Duration != 5*time.Minute || c.Admin.TokenEnv != "NETPROXY_ADMIN_TOKEN" {
		t.Errorf("other defaults: %+v %+v %+v", c.DNS, c.Limits, c.Admin)
	}
	t.Setenv("NETPROXY_HOME", "")
	t.Setenv("HOME", "/home/u")
	if c := Default(); c.Control.Socket != "/home/u/.netproxy/control.sock" {
		t.Errorf("NETPROXY_HOME default: %q", c.Control.Socket)
	}
}

func TestLoadOverDefault(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	p := write(t, "np.toml", `
[network]
mode = "limited"
[network.domains]
"example.com" = "allow"
"*.evil.test" = "deny"
[[network.domain_files]]
path = "lists/deny.txt"
decision = "deny"
[dns.hosts]
"svc.test" = ["127.0.0.1", "::1"]
[audit]
path = "~/audit.jsonl"
[guardian]
script = "g.star"
[approvals]
policy = "granular:sandbox_approval,rules"
[[approvals.hooks]]
command = ["/bin/true"]
timeout = "5s"
`)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(p)
	if c.Path != p || c.Network.Mode != "limited" || c.Listen.HTTP != "127.0.0.1:3128" || !c.Approvals.Enabled {
		t.Errorf("merge: %+v", c)
	}
	if len(c.Network.Domains) != 2 || c.Network.Domains["*.evil.test"] != "deny" {
		t.Errorf("domains: %v", c.Network.Domains)
	}
	if c.Network.DomainFiles[0].Path != filepath.Join(dir, "lists/deny.txt") || c.Guardian.Script != filepath.Join(dir, "g.star") {
		t.Errorf("relative paths: %q %q", c.Network.DomainFiles[0].Path, c.Guardian.Script)
	}
	if c.Audit.Path != "/home/u/audit.jsonl" {
		t.Errorf("~ path: %q", c.Audit.Path)
	}
	if len(c.DNS.Hosts["svc.test"]) != 2 || len(c.Approvals.Hooks) != 1 || c.Approvals.Hooks[0].Timeout.Duration != 5*time.Second {
		t.Errorf("hosts/hooks: %v %+v", c.DNS.Hosts, c.Approvals.Hooks)
	}
}

func TestErrorsNameKeysAndLines(t *testing.T) {
	cases := []struct {
		name, body string
		want       []string
	}{
		{"unknown key", "[network]\nallow_local_binding = false\ncolour = \"blue\"\n", []string{"np.toml:3", "network.colour", "unknown key"}},
		{"unknown table", "[bogus]\nx = 1\n", []string{"np.toml:1", "bogus", "unknown table"}},
		{"two unknown", "[network]\ncolour = \"blue\"\nflavour = \"mint\"\n", []string{"network.colour", "network.flavour"}},
		{"bad type", "[network]\nallow_local_binding = \"yes\"\n", []string{"np.toml:2", "network.allow_local_binding", "boolean"}},
		{"bad duration", "[dns]\ntimeout = \"soon\"\n", []string{"np.toml:2", "dns.timeout", "duration"}},
		{"syntax", "[network\n", []string{"np.toml:1"}},
		{"deny star", "[network.domains]\n\"*\" = \"deny\"\n", []string{"np.toml:2", `network.domains."*"`, "global wildcard"}},
		{"bad decision", "[network.domains]\n\"a.test\" = \"maybe\"\n", []string{`network.domains."a.test"`, "maybe"}},
		{"bad glob", "[network.domains]\n\"[\" = \"allow\"\n", []string{`network.domains."["`, "invalid glob"}},
		{"bad mode", "[network]\nmode = \"partial\"\n", []string{"np.toml:2", "network.mode", "partial"}},
		{"mode and deny star", "[network]\nmode = \"partial\"\n[network.domains]\n\"*\" = \"deny\"\n", []string{"network.mode", `network.domains."*"`}},
		{"unknown and semantic", "[network]\nmode = \"x\"\ncolour = 1\n", []string{"network.mode", "network.colour"}},
		{"approvals policy", "[approvals]\npolicy = \"sometimes\"\n", []string{"approvals.policy", "sometimes"}},
		{"granular flag", "[approvals]\npolicy = \"granular:everything\"\n", []string{"approvals.policy", "everything"}},
		{"reviewer", "[approvals]\nreviewer = \"robot\"\n", []string{"approvals.reviewer"}},
		{"guardian backend", "[guardian]\nbackend = \"magic\"\n", []string{"guardian.backend"}},
		{"guardian needs script", "[approvals]\nreviewer = \"guardian\"\n", []string{"guardian.script"}},
		{"guardian webhook url", "[approvals]\nreviewer = \"guardian\"\n[guardian]\nbackend = \"webhook\"\n", []string{"guardian.url"}},
		{"zero timeout", "[approvals]\ntimeout = \"0s\"\n", []string{"approvals.timeout"}},
		{"zero client_wait", "[approvals]\nclient_wait = \"0s\"\n", []string{"np.toml:2", "approvals.client_wait", "positive", "x-proxy-approval-wait: 0"}},
		{"zero max_pending", "[approvals]\nmax_pending = 0\n", []string{"np.toml:2", "approvals.max_pending", "positive"}},
		{"per-session over total", "[approvals]\nmax_pending = 10\nmax_pending_per_session = 11\n", []string{"np.toml:3", "approvals.max_pending_per_session", "exceeds"}},
		{"negative per-session", "[approvals]\nmax_pending_per_session = -1\n", []string{"approvals.max_pending_per_session"}},
		{"allowed host with port", "[admin]\nallowed_hosts = [\"ok.test\", \"np.example:9091\"]\n", []string{"np.toml:2", "admin.allowed_hosts[1]", "np.example:9091"}},
		{"allowed host wildcard", "[admin]\nallowed_hosts = [\"*.example\"]\n", []string{"admin.allowed_hosts[0]"}},
		{"dns host ip", "[dns.hosts]\n\"svc.test\" = [\"nope\"]\n", []string{`dns.hosts."svc.test"[0]`}},
		{"dns host type", "[dns.hosts]\n\"svc.test\" = \"1.2.3.4\"\n", []string{`dns.hosts."svc.test"`, "np.toml:2"}},
		{"domain file decision", "[[network.domain_files]]\npath = \"x\"\ndecision = \"maybe\"\n", []string{"np.toml:3", "network.domain_files[0].decision"}},
		{"listen", "[listen]\nhttp = \"3128\"\n", []string{"listen.http"}},
		{"hook command", "[[approvals.hooks]]\ncommand = []\n", []string{"approvals.hooks[0].command"}},
		{"log level", "[log]\nlevel = \"loud\"\n", []string{"log.level"}},
		{"upstream proxy", "[network]\nupstream_proxy = \"socks5://x:1\"\n", []string{"network.upstream_proxy"}},
		{"enabled type", "[network]\nenabled = \"no\"\n", []string{"np.toml:2", "network.enabled", "boolean"}},
		{"bad cidr", "[network.domains]\n\"10.0.0.0/33\" = \"deny\"\n", []string{"np.toml:2", `network.domains."10.0.0.0/33"`, "CIDR"}},
		{"cidr host bits", "[network.domains]\n\"ok.test\" = \"allow\"\n\"10.0.0.1/8\" = \"allow\"\n", []string{"np.toml:3", `network.domains."10.0.0.1/8"`, "10.0.0.0/8"}},
		{"cidr with bad port", "[network.domains]\n\"10.0.0.0/8:0\" = \"deny\"\n", []string{"np.toml:2", `network.domains."10.0.0.0/8:0"`, "port"}},
		{"range upside down", "[network.domains]\n\"a.test:9-3\" = \"allow\"\n", []string{"np.toml:2", `network.domains."a.test:9-3"`, "port"}},
		{"cidr with glob", "[network.domains]\n\"10.*.0.0/8\" = \"deny\"\n", []string{"np.toml:2", "wildcard"}},
		{"dns server name", "[dns]\nservers = [\"127.0.0.1:53\", \"dns.example:53\"]\n", []string{"np.toml:2", "dns.servers[1]", "IP address"}},
		{"dns server no port", "[dns]\nservers = [\"127.0.0.1\"]\n", []string{"np.toml:2", "dns.servers[0]", "ip:port"}},
		{"dns servers type", "[dns]\nservers = \"127.0.0.1:53\"\n", []string{"np.toml:2", "dns.servers"}},
		{"enabled number", "[network]\nmode = \"full\"\nenabled = 0\n", []string{"np.toml:3", "network.enabled", "boolean"}},
	}
	for _, c := range cases {
		p := write(t, "np.toml", c.body)
		errs := Validate(p)
		if len(errs) == 0 {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		var all []string
		for _, e := range errs {
			all = append(all, e.Error())
		}
		text := strings.Join(all, "\n")
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: errors do not mention %q:\n%s", c.name, w, text)
			}
		}
		if _, err := Load(p); err == nil {
			t.Errorf("%s: Load accepted what Validate rejected", c.name)
		}
	}
}

// network.enabled is the kill switch: on unless a file turns it off, and a
// file that sets only other [network] keys keeps it on.
func TestNetworkEnabled(t *testing.T) {
	for _, c := range []struct {
		name, body string
		want       bool
	}{
		{"absent", "[network]\nmode = \"limited\"\n", true},
		{"no network table", "[dns]\ntimeout = \"1s\"\n", true},
		{"explicit true", "[network]\nenabled = true\n", true},
		{"off", "[network]\nenabled = false\n[network.domains]\n\"a.test\" = \"allow\"\n", false},
	} {
		c := c
		t.Run(c.name, func(t *testing.T) {
			p := write(t, "np.toml", c.body)
			if errs := Validate(p); len(errs) != 0 {
				t.Fatalf("Validate: %v", errs)
			}
			cfg, err := Load(p)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Network.Enabled != c.want {
				t.Fatalf("network.enabled = %v, want %v", cfg.Network.Enabled, c.want)
			}
		})
	}
	if !Default().Network.Enabled {
		t.Fatal("embedded default: network.enabled must be true")
	}
}

func TestValidateDomainFiles(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "deny.txt"), []byte("ok.test\n# c\n[\n*\n169.254.0.0/16\n10.0.0.0/40\n"), 0o644)
	p := filepath.Join(dir, "np.toml")
	os.WriteFile(p, []byte("[[network.domain_files]]\npath = \"deny.txt\"\ndecision = \"deny\"\n[[network.domain_files]]\npath = \"nope.txt\"\ndecision = \"allow\"\n"), 0o644)
	var all []string
	for _, e := range Validate(p) {
		all = append(all, e.Error())
	}
	text := strings.Join(all, "\n")
	for _, w := range []string{filepath.Join(dir, "deny.txt") + ":3", filepath.Join(dir, "deny.txt") + ":4", filepath.Join(dir, "deny.txt") + ":6", "nope.txt", "network.domain_files[1].path"} {
		if !strings.Contains(text, w) {
			t.Errorf("missing %q in:\n%s", w, text)
		}
	}
}

func TestMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "none.toml"))
	if err == nil || !strings.Contains(err.Error(), "none.toml") {
		t.Fatalf("missing file error: %v", err)
	}
}

func TestExpandPath(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	t.Setenv("NETPROXY_HOME", "~/np")
	for in, want := range map[string]string{
		"$NETPROXY_HOME/x": "/home/u/np/x", "${NETPROXY_HOME}/y": "/home/u/np/y", "~/a": "/home/u/a",
		"rel/b": "/etc/np/rel/b", "/abs/c": "/abs/c", "": "", "$NETPROXY_HOMEX/z": "/etc/np/$NETPROXY_HOMEX/z",
	} {
		if got := ExpandPath(in, "/etc/np"); got != want {
			t.Errorf("ExpandPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzParse: arbitrary bytes never panic the loader, and an accepted file
// always carries valid mode and decisions.
func FuzzParse(f *testing.F) {
	f.Add([]byte("[network]\nmode = \"full\"\n[network.domains]\n\"a.test\" = \"allow\"\n"))
	f.Add([]byte("[bogus]\nx=1\n"))
	f.Add([]byte("[dns.hosts]\n\"a\" = [\"1.2.3.4\"]\n"))
	// Wrong-typed values exercise the blank-and-retry path.
	f.Add([]byte("[network]\nenabled = \"no\"\n[dns]\ntimeout = \"xx\"\n[dns.hosts]\n\"a\" = [\n 1,\n]\n[approvals]\nhooks = [{ command = 7 }]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "/tmp/fuzz.toml")
		if err != nil {
			return
		}
		if c.Network.Mode != "full" && c.Network.Mode != "limited" {
			t.Fatalf("accepted mode %q", c.Network.Mode)
		}
		for k, v := range c.Network.Domains {
			if v != "allow" && v != "deny" {
				t.Fatalf("accepted decision %q for %q", v, k)
			}
		}
	})
}

// TestEmbeddedDefaultIsStrict: every key of configs/default.toml exists in
// the schema (the default itself is decoded leniently at start-up).
func TestEmbeddedDefaultIsStrict(t *testing.T) {
	if _, err := Parse(configs.DefaultTOML, filepath.Join(t.TempDir(), "default.toml")); err != nil {
		t.Fatalf("embedded default does not validate strictly: %v", err)
	}
}

func TestKeyLines(t *testing.T) {
	doc := "# c\n[network]\nmode = \"x\"\n[network.domains]\n\"a.b\" = \"allow\"\n'lit' = \"deny\"\n[[approvals.hooks]]\ncommand = []\n[[approvals.hooks]]\ntimeout = \"1s\"\n[dns.hosts]\n\"h.test\" = [\"1\"]\n"
	lines := keyLines([]byte(doc))
	for key, want := range map[string]int{
		"network.mode": 3, `network.domains."a.b"`: 5, "network.domains.lit": 6, "approvals.hooks[0].command": 8,
		"approvals.hooks[1].timeout": 10, `dns.hosts."h.test"[0]`: 12, "approvals.hooks[1].command": 9, "nothing.here": 0,
	} {
		if got := lineFor(lines, key); got != want {
			t.Errorf("lineFor(%s) = %d, want %d", key, got, want)
		}
	}
}

// TestCollectionsReplaceDefaults: a table or array the file writes replaces
// the base's (no merging of allow lists); one it leaves out is inherited.
func TestCollectionsReplaceDefaults(t *testing.T) {
	base := append(append([]byte(nil), configs.DefaultTOML...), []byte(`
[network.domains]
"base.test" = "allow"
[dns.hosts]
"base.test" = ["1.1.1.1"]
[[approvals.hooks]]
command = ["/base/hook"]
`)...)
	// the appended tables repeat ones the default already opens; rebuild
	// the base without those empty openings
	base = []byte(strings.NewReplacer("[network.domains]             # pattern = \"allow\" | \"deny\"; empty: nothing is allowed\n", "",
		"[dns.hosts]                   # static answers, consulted before the system resolver\n", "").Replace(string(base)))
	c, errs := decodeOver(base, []byte("[network.domains]\n\"file.test\" = \"allow\"\n"), "/x/np.toml", "np.toml")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if len(c.Network.Domains) != 1 || c.Network.Domains["file.test"] != "allow" {
		t.Errorf("domains must be replaced, got %v", c.Network.Domains)
	}
	if len(c.DNS.Hosts["base.test"]) != 1 || len(c.Approvals.Hooks) != 1 {
		t.Errorf("untouched collections must be inherited: %v %v", c.DNS.Hosts, c.Approvals.Hooks)
	}
	c, errs = decodeOver(base, []byte("[dns.hosts]\n[[approvals.hooks]]\ncommand = [\"/file/hook\"]\n"), "/x/np.toml", "np.toml")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if len(c.DNS.Hosts) != 0 || len(c.Approvals.Hooks) != 1 || c.Approvals.Hooks[0].Command[0] != "/file/hook" || c.Network.Domains["base.test"] != "allow" {
		t.Errorf("replace: hosts %v hooks %+v domains %v", c.DNS.Hosts, c.Approvals.Hooks, c.Network.Domains)
	}
}

// A wrong-typed value must not hide the rest of the file's problems: every
// error comes out in one run, each with its line, and nothing is reported
// twice. A table header of the wrong type still stops at itself.
func TestTypeErrorsDoNotStopValidation(t *testing.T) {
	cases := []struct {
		name, body string
		want       []string
		count      int
	}{
		{"all six", "[network]\nmode = \"fast\"\nbogus = 1\n\n[network.domains]\n\"*\" = \"deny\"\n\"ok.test\" = \"maybe\"\n\n[dns]\ntimeout = \"xx\"\n\n[approvals]\npolicy = \"sometimes\"\n",
			[]string{"np.toml:2: network.mode", "np.toml:3: network.bogus", `np.toml:6: network.domains."*"`,
				`np.toml:7: network.domains."ok.test"`, "np.toml:10:11: dns.timeout", "np.toml:13: approvals.policy"}, 6},
		{"two type errors", "[network]\nenabled = \"no\"\nallow_local_binding = 3\n[log]\nlevel = \"loud\"\n",
			[]string{"np.toml:2", "network.enabled", "np.toml:3", "network.allow_local_binding", "np.toml:5: log.level"}, 3},
		{"multi-line value", "[dns.hosts]\n\"a.test\" = [\n  1,\n  2,\n]\n[network]\nmode = \"x\"\n",
			[]string{`dns.hosts."a.test"`, "np.toml:7: network.mode"}, 2},
		{"inline table", "[approvals]\nhooks = [{ command = 7 }]\nreviewer = \"robot\"\n",
			[]string{"np.toml:2", "approvals.hooks", "np.toml:3: approvals.reviewer"}, 2},
		{"crlf", "[network]\r\nenabled = \"no\"\r\n[log]\r\nformat = \"xml\"\r\n",
			[]string{"np.toml:2", "network.enabled", "np.toml:4: log.format"}, 2},
		{"type error then syntax error", "[dns]\ntimeout = \"x\"\n[log\n", []string{"np.toml:3"}, 1},
		{"durations written as numbers", "[dns]\ntimeout = 5\n[limits]\nidle_timeout = true\n[[approvals.hooks]]\ncommand = [\"h\"]\ntimeout = 3\n[log]\nlevel = \"loud\"\n",
			[]string{"np.toml:2: dns.timeout", "np.toml:4: limits.idle_timeout", "np.toml:7: approvals.hooks[0].timeout", "np.toml:9: log.level"}, 4},
	}
	for _, c := range cases {
		p := write(t, "np.toml", c.body)
		errs := Validate(p)
		var all []string
		for _, e := range errs {
			all = append(all, e.Error())
		}
		text := strings.Join(all, "\n")
		if len(errs) != c.count {
			t.Errorf("%s: %d errors, want %d:\n%s", c.name, len(errs), c.count, text)
		}
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: errors do not mention %q:\n%s", c.name, w, text)
			}
		}
		if _, err := Load(p); err == nil {
			t.Errorf("%s: Load accepted what Validate rejected", c.name)
		}
	}
}
