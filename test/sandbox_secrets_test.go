package test

// End-to-end test of SPEC §6.5's first sentence (issue 22 item 2): in every
// tier, as root and as nobody, with and without netproxy's network, the
// sandbox never reads $NETPROXY_HOME, a [[credentials]] secret_file, the
// audit log (rotated copies included), the configuration file, the default
// deny-read list of the calling user or a --deny-read path — while an
// ordinary file next to each of them stays readable.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secretsFixture is a host with secrets: a fake HOME (the test folder of
// WriteProxyConfig) holding the default deny-read paths, NETPROXY_HOME
// below it, netproxy's audit and configuration beside it, a credential
// secret outside both, and a workspace with a --deny-read folder inside.
type secretsFixture struct {
	p       *Proxy
	ws      string
	deny    []string          // --deny-read arguments
	secrets map[string]string // path → marker that must never be printed
	// viaNetproxy are the secrets only netproxy knows about (execwrap
	// alone hides the others).
	viaNetproxy map[string]bool
	visible     map[string]string // path → marker that must be printed
}

func newSecretsFixture(t *testing.T) *secretsFixture {
	t.Helper()
	// Outside /tmp: the namespaces tier's private /tmp would hide a
	// fixture there whatever execwrap does.
	base, err := os.MkdirTemp("/var/tmp", "ews-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	escBins(t) // copied once for the whole run: not into this test's TMPDIR
	t.Setenv("TMPDIR", base)

	ca := newTestCA(t, "e2e secrets MITM CA")
	cfg := StdConfig()
	p := WriteProxyConfig(t, cfg)
	for d := p.Dir; d != base; d = filepath.Dir(d) {
		os.Chmod(d, 0o755) // nobody must reach every file: only the sandbox may hide them
	}
	home, np := p.Dir, p.Home
	credFile := filepath.Join(home, "creds", "api.secret")
	cfgText, err := os.ReadFile(p.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	cfgText = append(cfgText, fmt.Sprintf(`
[mitm]
enabled = true
ca_cert = %q
ca_key = %q

[[credentials]]
name = "api"
hosts = ["api.cred.test"]
header = "Authorization"
format = "Bearer {secret}"
secret_file = %q
env = "API_KEY"
`, filepath.Join(np, "ca.pem"), filepath.Join(np, "ca-key.pem"), credFile)...)

	mark := func(name string) string {
		b := make([]byte, 6)
		rand.Read(b)
		return name + "-" + hex.EncodeToString(b)
	}
	f := &secretsFixture{p: p, ws: sbxDir(t), secrets: map[string]string{}, viaNetproxy: map[string]bool{}, visible: map[string]string{}}
	keyPEM := ca.keyPEM()
	keyLine := strings.Split(string(keyPEM), "\n")[1] // a line of the key's base64 body
	ghReal := filepath.Join(home, "gh-real")
	secret := map[string]string{
		".ssh/id_ed25519":     mark("SECRET-SSH"),
		".aws/credentials":    mark("SECRET-AWS"),
		".netrc":              mark("SECRET-NETRC"),
		".docker/config.json": mark("SECRET-DOCKER"),
		".git-credentials":    mark("SECRET-GITCRED"),
		"gh-real/hosts.yml":   mark("SECRET-GH"), // through the symlink ~/.config/gh
		"home/admin-token":    mark("SECRET-ADMIN"),
		"home/ca-key.pem":     keyLine,
		"home/rules/x.rules":  mark("SECRET-RULES"),
		"creds/api.secret":    mark("SECRET-CRED"),
		"audit.jsonl":         mark("SECRET-AUDIT-LIVE"),
		"audit.jsonl.1":       mark("SECRET-AUDIT-ROTATED"),
		"private/deny.txt":    mark("SECRET-DENY"),
	}
	visible := map[string]string{
		"ordinary.txt":       mark("VISIBLE-HOME"),
		".docker/other":      mark("VISIBLE-DOCKER-OTHER"),
		".config/other.conf": mark("VISIBLE-CONFIG"),
		"creds/readme.txt":   mark("VISIBLE-CREDS"),
		"private/keep.txt":   mark("VISIBLE-PRIVATE"),
		"audit-notes.txt":    mark("VISIBLE-AUDIT-NEIGHBOUR"),
		"home/ca.pem":        "", // public; not asserted either way
	}
	write := func(rel, content string, into map[string]string) {
		path := filepath.Join(home, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if into != nil && content != "" {
			into[path] = content
		}
	}
	for rel, m := range secret {
		write(rel, m, f.secrets)
	}
	for rel, m := range visible {
		write(rel, m, f.visible)
	}
	// The rules folder is read by netproxy: its file must stay Starlark.
	rules := filepath.Join(np, "rules", "x.rules")
	os.WriteFile(rules, []byte("# "+f.secrets[rules]+"\n"), 0o644)
	os.WriteFile(filepath.Join(np, "ca.pem"), ca.pem, 0o644)
	os.WriteFile(filepath.Join(np, "ca-key.pem"), keyPEM, 0o644)
	os.Chmod(np, 0o755)
	if err := os.Symlink(ghReal, filepath.Join(home, ".config", "gh")); err != nil {
		t.Fatal(err)
	}
	cfgMark := mark("SECRET-CONFIG")
	cfgText = append(cfgText, "# "+cfgMark+"\n"...)
	if err := os.WriteFile(p.ConfigPath, cfgText, 0o644); err != nil {
		t.Fatal(err)
	}
	f.secrets[p.ConfigPath] = cfgMark
	for _, rel := range []string{"creds/api.secret", "audit.jsonl", "audit.jsonl.1"} {
		f.viaNetproxy[filepath.Join(home, rel)] = true
	}
	f.viaNetproxy[p.ConfigPath] = true

	// A folder inside the workspace hidden with --deny-read: the command
	// could rename it if it were an ordinary folder.
	vault := filepath.Join(f.ws, "vault")
	os.MkdirAll(vault, 0o755)
	vm := mark("SECRET-WS-VAULT")
	os.WriteFile(filepath.Join(vault, "key"), []byte(vm+"\n"), 0o644)
	f.secrets[filepath.Join(vault, "key")] = vm
	wm := mark("VISIBLE-WS")
	os.WriteFile(filepath.Join(f.ws, "ordinary.txt"), []byte(wm+"\n"), 0o644)
	f.visible[filepath.Join(f.ws, "ordinary.txt")] = wm
	f.deny = []string{filepath.Join(home, "private", "deny.txt"), vault}

	p.Start(t)
	// The control socket is the owner's (0600); nobody's execwrap must
	// reach it for the unprivileged runs.
	os.Chmod(p.Control, 0o666)
	writeScript(t, f.ws, "probe.sh", `
home=$1; shift
for f in "$@"; do echo "== $f"; cat "$f" 2>&1; done
echo "== ls"; ls -la "$home" "$home/.ssh" "$home/.docker" "$home/home" 2>&1
echo "== find"; find "$home" -type f -exec cat {} + 2>&1
echo "== grep"; grep -r . "$home" 2>&1
echo "== proc"; cat "/proc/self/root$home/.netrc" 2>&1
echo "== link"; ln -sf "$home/.ssh/id_ed25519" link 2>&1 && cat link 2>&1
echo "== rename"; mv vault vault2 2>&1 && { cat vault2/key 2>&1; mv vault2 vault; }; cat vault/key 2>&1
echo "== end"
true
`)
	if os.Geteuid() == 0 {
		os.Chown(f.ws, 65534, 65534)
		os.Chown(filepath.Join(f.ws, "probe.sh"), 65534, 65534)
	}
	return f
}

// run runs the probe through `execwrap run` with the fixture's HOME and
// NETPROXY_HOME; extra are more run flags.
func (f *secretsFixture) run(t *testing.T, u escUser, tier string, extra ...string) (sbxResult, int, string) {
	t.Helper()
	args := []string{"run", "--json", "--tier", tier, "--timeout", "30s", "--control", f.p.Control}
	for _, d := range f.deny {
		args = append(args, "--deny-read", d)
	}
	args = append(args, extra...)
	args = append(args, "--", "sh", "./probe.sh", f.p.Dir)
	for p := range f.secrets {
		args = append(args, p)
	}
	for p := range f.visible {
		args = append(args, p)
	}
	cmd := escCmd(t, u, false, f.ws, args...)
	var env []string
	for _, kv := range cmd.Env {
		if !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "NETPROXY_HOME=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "HOME="+f.p.Dir, "NETPROXY_HOME="+f.p.Home)
	return escRunCmd(t, cmd, nil)
}

// check fails on any secret marker in the output and on any visible marker
// missing from it; only names for which want(path) holds are secrets here.
func (f *secretsFixture) check(t *testing.T, r sbxResult, code int, stderr string, want func(path string) bool) {
	t.Helper()
	out := r.Stdout + r.Stderr
	if code != 0 || !strings.Contains(out, "== end") {
		t.Fatalf("probe did not run to its end: exit %d\nstdout %s\nstderr %s %s", code, r.Stdout, r.Stderr, stderr)
	}
	var leaked []string
	for p, m := range f.secrets {
		if want(p) && strings.Contains(out, m) {
			leaked = append(leaked, p)
		}
	}
	var missing []string
	for p, m := range f.visible {
		if !strings.Contains(out, m) {
			missing = append(missing, p)
		}
	}
	if _, err := os.Stat(filepath.Join(f.ws, "vault", "key")); err != nil {
		t.Fatalf("the hidden folder is no longer at its name after the run: %v\n%s", err, out)
	}
	if len(leaked) > 0 || len(missing) > 0 {
		t.Fatalf("tier %s: leaked %v; ordinary files not readable %v\n%s", r.Sandbox.Tier, leaked, missing, out)
	}
}

func TestSandboxSecretsHidden(t *testing.T) {
	f := newSecretsFixture(t)
	all := func(string) bool { return true }
	for _, tu := range escTierUsers(t) {
		for _, network := range []string{"proxied", "none"} {
			t.Run(tu.tier+"/"+string(tu.u)+"/"+network, func(t *testing.T) {
				r, code, stderr := f.run(t, tu.u, tu.tier, "--network", network)
				if r.Sandbox.Tier != tu.tier {
					t.Fatalf("ran in tier %q, want %s: %s", r.Sandbox.Tier, tu.tier, stderr)
				}
				f.check(t, r, code, stderr, all)
			})
		}
	}
}

// Without netproxy, execwrap still hides what it knows itself:
// NETPROXY_HOME, the default deny-read list and --deny-read.
func TestSandboxSecretsNoNetproxy(t *testing.T) {
	f := newSecretsFixture(t)
	own := func(p string) bool { return !f.viaNetproxy[p] }
	for _, tu := range escTierUsers(t) {
		t.Run(tu.tier+"/"+string(tu.u), func(t *testing.T) {
			r, code, stderr := f.run(t, tu.u, tu.tier, "--network", "none", "--control", filepath.Join(f.ws, "no-such.sock"))
			f.check(t, r, code, stderr, own)
		})
	}
}

// A control socket that answers, but not with a list of paths, makes the
// run fail closed: nothing runs.
func TestSandboxSecretsMalformedAnswerFailsClosed(t *testing.T) {
	dir := sbxDir(t)
	answers := map[string]string{
		"not_json":   `paths: /x`,
		"wrong_type": `{"paths": "/x"}`,
		"relative":   `{"paths": ["relative/path"]}`,
		"missing":    `{}`,
	}
	for _, name := range []string{"not_json", "wrong_type", "relative", "missing"} {
		t.Run(name, func(t *testing.T) {
			sock := filepath.Join(dir, name+".sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			body := answers[name]
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(body))
			})}
			go srv.Serve(ln)
			defer srv.Shutdown(context.Background())
			marker := filepath.Join(dir, "ran-"+name)
			r, code, stderr := sbxRun(t, []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "NETPROXY_HOME=" + dir}, dir,
				"--network", "none", "--control", sock, "--", "touch", marker)
			if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the command ran although netproxy's secret paths were unreadable")
			}
			if code != 125 || !strings.Contains(stderr+r.Stderr, "secret-paths") {
				t.Fatalf("exit %d, want 125 naming secret-paths\n%s", code, stderr)
			}
		})
	}
}
