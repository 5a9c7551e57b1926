package test

// End-to-end runs of `execwrap selftest` (SPEC §6.7): the real execwrap
// against a real `netproxy serve`, in both tiers, as root and as nobody
// (setpriv), with --network proxied and none, text and --json.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netproxy/netproxy/sandbox/selftest"
)

// selftestHome makes a HOME, a NETPROXY_HOME and a --deny-read folder with
// secrets, outside /tmp
// (the namespaces tier's private /tmp would hide them for another reason),
// owned by u so the host side can read them as u.
func selftestHome(t *testing.T, u escUser) (home, npHome, denyRead string) {
	t.Helper()
	base, err := os.MkdirTemp("/var/tmp", "execwrap-selftest-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	home, npHome, denyRead = filepath.Join(base, "home"), filepath.Join(base, "netproxy"), filepath.Join(base, "deny")
	files := map[string]string{
		filepath.Join(home, ".ssh", "id_ed25519"):  "-----BEGIN OPENSSH PRIVATE KEY----- selftest",
		filepath.Join(home, ".aws", "credentials"): "[default]\naws_secret_access_key = selftest\n",
		filepath.Join(home, ".netrc"):              "machine example.test login me password selftest\n",
		filepath.Join(npHome, "admin-token"):       "selftest-admin-token\n",
		filepath.Join(base, "deny", "vault.key"):   "selftest --deny-read secret\n",
	}
	for f, body := range files {
		os.MkdirAll(filepath.Dir(f), 0o700)
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if u == asNobody {
		filepath.Walk(base, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	}
	return home, npHome, denyRead
}

// selftestWorkspace is a workdir with a .git (config, hooks) for the
// protected-path probes.
func selftestWorkspace(t *testing.T, u escUser) string {
	dir := escDir(t, u)
	os.MkdirAll(filepath.Join(dir, ".git", "hooks"), 0o755)
	os.WriteFile(filepath.Join(dir, ".git", "config"), []byte("[core]\n\tbare = false\n"), 0o644)
	if u == asNobody {
		filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	}
	return dir
}

// parseSelftestText reads the text output: one "name verdict evidence"
// line per probe between the header and the summary.
func parseSelftestText(t *testing.T, out string) map[string]selftest.Result {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(selftest.Names)+2 || !strings.HasPrefix(lines[0], "execwrap selftest: tier ") {
		t.Fatalf("want a header, %d probe lines and a summary, got %d lines:\n%s", len(selftest.Names), len(lines), out)
	}
	got := map[string]selftest.Result{}
	for i, n := range selftest.Names {
		f := strings.Fields(lines[i+1])
		if len(f) < 3 || f[0] != n {
			t.Fatalf("line %d is %q, want probe %s", i+1, lines[i+1], n)
		}
		v := strings.ToLower(f[1])
		got[n] = selftest.Result{Name: n, Result: selftest.Outcome(v), Evidence: strings.Join(f[2:], " ")}
	}
	return got
}

func TestSelftest(t *testing.T) {
	// StdConfig: loopback is not allow-listed, so the loopback spellings
	// and the self-loop must be refused (not_allowed, or own_listener).
	p := StartProxy(t, StdConfig())
	up := StartUpstream(t, true) // up.test is allowed: the SNI fronting tunnel
	type run struct {
		tier, network string
		u             escUser
		json          bool
		// probeHost runs the SNI fronting probe too (SPEC §3.11): it
		// must hold like every other probe.
		probeHost bool
	}
	var runs []run
	for _, tier := range []string{"namespaces", "landlock"} {
		for _, u := range escUsers(t) {
			nets := []string{"proxied", "none"}
			if u == asNobody {
				nets = []string{"none"} // nobody cannot reach the root-only control socket
			}
			for _, n := range nets {
				runs = append(runs, run{tier, n, u, false, false}, run{tier, n, u, true, false})
			}
		}
		runs = append(runs, run{tier, "proxied", asRoot, true, true})
	}
	for _, r := range runs {
		mode := "text"
		if r.json {
			mode = "json"
		}
		if r.probeHost {
			mode += "/probe-host"
		}
		t.Run(fmt.Sprintf("%s/%s/%s/%s", r.tier, r.network, r.u, mode), func(t *testing.T) {
			dir := selftestWorkspace(t, r.u)
			home, npHome, denyRead := selftestHome(t, r.u)
			args := []string{"selftest", "--tier", r.tier, "--network", r.network, "--control", p.Control, "--deny-read", denyRead}
			if r.probeHost {
				args = append(args, "--probe-host", fmt.Sprintf("up.test:%d", up.Port))
			}
			if r.json {
				args = append(args, "--json")
			}
			cmd := escCmd(t, r.u, false, dir, args...)
			selftestBinOutsideTmp(t, cmd)
			cmd.Env = append(cmd.Env, "HOME="+home, "NETPROXY_HOME="+npHome)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			var got map[string]selftest.Result
			if r.json {
				var rep selftest.Report
				if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
					t.Fatalf("--json: %v\n%s\n%s", err, out.String(), errb.String())
				}
				if rep.Tier != r.tier || rep.Network != r.network || len(rep.Probes) != len(selftest.Names) {
					t.Fatalf("report %s %s with %d probes:\n%s", rep.Tier, rep.Network, len(rep.Probes), out.String())
				}
				got = map[string]selftest.Result{}
				for i, pr := range rep.Probes {
					if pr.Name != selftest.Names[i] {
						t.Fatalf("probe %d is %s, want %s", i, pr.Name, selftest.Names[i])
					}
					got[pr.Name] = pr
				}
			} else {
				got = parseSelftestText(t, out.String())
				if !strings.Contains(out.String(), "tier "+r.tier+", network "+r.network) {
					t.Fatalf("header names another run:\n%s", out.String())
				}
			}
			for _, n := range selftest.Names {
				res := got[n]
				switch {
				case res.Result == selftest.Held:
				case res.Result == selftest.Skipped && !mustRun(n, r.tier, r.network, r.u, r.probeHost):
				default:
					t.Errorf("%s: %s %s", n, res.Result, res.Evidence)
				}
			}
			if code != selftest.ExitAllHeld {
				t.Errorf("exit %d, want %d\nstderr: %s", code, selftest.ExitAllHeld, errb.String())
			}
			// Nothing a probe planted stays on the host.
			for _, g := range []string{"/etc/execwrap-selftest-*", filepath.Join(home, "execwrap-selftest-*"), filepath.Join(dir, "execwrap-selftest-*"), filepath.Join(dir, ".git", "*", "execwrap-selftest-*")} {
				if m, _ := filepath.Glob(g); len(m) > 0 {
					t.Errorf("left behind: %v", m)
				}
			}
		})
	}
}

// selftestBinOutsideTmp makes cmd run a copy of execwrap kept outside
// /tmp. The battery re-executes /proc/self/exe inside the sandbox, and in
// the namespaces tier a binary under the host's /tmp (escBins') lies
// below the private /tmp mount, where the Landlock split of "/" around
// the hidden paths grants nothing (the grant for /tmp names the tmpfs):
// EACCES. Installed binaries do not live in /tmp; see docs/sandbox.md
// "execwrap selftest".
func selftestBinOutsideTmp(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	ew, _ := escBins(t)
	d, err := os.MkdirTemp("/var/tmp", "execwrap-selftest-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	os.Chmod(d, 0o755)
	b, err := os.ReadFile(ew)
	if err == nil {
		err = os.WriteFile(filepath.Join(d, "execwrap"), b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range cmd.Args {
		if a == ew {
			cmd.Args[i] = filepath.Join(d, "execwrap")
		}
	}
	if cmd.Path == ew {
		cmd.Path = filepath.Join(d, "execwrap")
	}
}

// mustRun: the probes this test sets up a target for may not be skipped.
func mustRun(probe, tier, network string, u escUser, probeHost bool) bool {
	switch {
	case strings.HasPrefix(probe, "capture."):
		return network == "proxied" && tier == "namespaces" // capture is on by default there (SPEC §6.6)
	case strings.HasPrefix(probe, "net.tcp4") || strings.HasPrefix(probe, "net.udp4") || probe == "net.tfo4":
		return true // 127.0.0.1 always exists; the VM has a non-loopback IPv4 address
	case probe == "netproxy.direct":
		return u == asRoot // nobody cannot list root's netproxy's sockets
	case probe == "tls.sni-fronting":
		return network == "proxied" && probeHost
	case probe == "fs.secret-deny-read":
		return true
	case probe == "fs.secret-netproxy-paths":
		return u == asRoot // nobody cannot reach the root-only control socket
	case probe == "fs.secret-ssh", probe == "fs.secret-aws", probe == "fs.secret-netrc",
		probe == "fs.secret-admin-token", probe == "fs.secret-netproxy-home":
		return true
	case strings.HasPrefix(probe, "fs.protected-"), strings.HasPrefix(probe, "fs.setuid"),
		probe == "fs.setgid", probe == "fs.file-caps", probe == "fs.write-etc", probe == "fs.write-home", probe == "fs.write-tmp":
		return true
	}
	return false
}
