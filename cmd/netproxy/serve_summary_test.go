package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/server"
)

func TestPolicySummary(t *testing.T) {
	home := t.TempDir()
	t.Setenv("NETPROXY_HOME", home)
	for _, tc := range []struct {
		name, toml string
		want       []string
		not        []string
	}{
		{"embedded default", "", []string{
			"netproxy: policy: 0 allow entries, 0 deny entries, mode full\n",
			"netproxy: unlisted hosts wait for approval for up to 120 s (approvals page or `netproxy approvals`); no decision denies; a request is told \"pending\" after 25 s and retries\n",
			"netproxy: nothing is allowed until it is listed in [network.domains] or approved\n",
		}, nil},
		{"lists and limited mode", `[network]
mode = "limited"
[network.domains]
"api.example.com" = "allow"
"*.pypi.org" = "allow"
"evil.example" = "deny"
[approvals]
timeout = "45s"
`, []string{
			"netproxy: policy: 2 allow entries, 1 deny entry, mode limited (GET, HEAD and OPTIONS only)\n",
			"wait for approval for up to 45 s",
		}, []string{"nothing is allowed"}},
		{"approvals off", "[network.domains]\n\"a.example\" = \"allow\"\n[approvals]\nenabled = false\n",
			[]string{"1 allow entry, 0 deny entries", "netproxy: unlisted hosts are blocked (approvals.enabled = false)\n"}, []string{"wait"}},
		{"policy never", "[approvals]\npolicy = \"never\"\n",
			[]string{"unlisted hosts are blocked (approvals.policy = never)", "nothing is allowed until"}, []string{"wait"}},
		{"hooks", "[[approvals.hooks]]\ncommand = [\"/bin/true\"]\n",
			[]string{"wait for approval for up to 120 s, after 1 approval hook"}, nil},
		{"guardian", "[approvals]\nreviewer = \"guardian\"\n[guardian]\nbackend = \"webhook\"\nurl = \"http://127.0.0.1:1/review\"\ntimeout = \"7s\"\n",
			[]string{"unlisted hosts wait for the Guardian (guardian.backend = webhook) for up to 7 s; no answer denies"}, []string{"approvals page"}},
		{"guardian reviewer, untrusted policy goes to a human", "[approvals]\nreviewer = \"guardian\"\npolicy = \"untrusted\"\n[guardian]\nbackend = \"webhook\"\nurl = \"http://127.0.0.1:1/review\"\n",
			[]string{"wait for approval for up to 120 s"}, []string{"Guardian"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			if tc.toml != "" {
				var err error
				if cfg, err = config.Parse([]byte(tc.toml), "test.toml"); err != nil {
					t.Fatal(err)
				}
			}
			snap, err := server.LoadPolicy(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := policySummary(snap, cfg)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("summary lacks %q:\n%s", w, got)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("summary says %q:\n%s", n, got)
				}
			}
		})
	}

	// The README quotes what serve says for the sample configuration.
	sample, err := config.Load(filepath.Join("..", "..", "configs", "sample.toml"))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := server.LoadPolicy(sample)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(policySummary(snap, sample)), "\n") {
		if !strings.Contains(string(readme), "#   "+line+"\n") {
			t.Errorf("README.md does not quote serve's line for configs/sample.toml: %q", line)
		}
	}

	// Persisted network_rule()s count: they are in the live lists.
	if err := os.MkdirAll(filepath.Join(home, "rules"), 0o700); err != nil {
		t.Fatal(err)
	}
	rule := `network_rule(host="saved.example", protocol="https", decision="allow", justification="approved earlier")` + "\n"
	if err := os.WriteFile(filepath.Join(home, "rules", "default.rules"), []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	if snap, err = server.LoadPolicy(cfg); err != nil {
		t.Fatal(err)
	}
	if got := policySummary(snap, cfg); !strings.Contains(got, "policy: 1 allow entry, 0 deny entries") || strings.Contains(got, "nothing is allowed") {
		t.Errorf("a persisted allow rule is not counted:\n%s", got)
	}
}
