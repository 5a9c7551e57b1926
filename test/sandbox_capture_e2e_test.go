package test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Transparent capture (SPEC §6.6, issue 28) end to end: real programs that
// ignore the proxy variables (every one is unset inside) run in `execwrap
// run --network proxied` and still reach allowed hosts, only through
// netproxy; a denied name is refused, listed in network_denials and never
// resolved anywhere; other DNS types are REFUSED, UDP is refused.

// unsetProxy is the shell prefix that drops every proxy variable execwrap
// set, so only capture can carry a connection.
const unsetProxy = "unset HTTP_PROXY HTTPS_PROXY ALL_PROXY NO_PROXY http_proxy https_proxy all_proxy no_proxy NODE_USE_ENV_PROXY GIT_SSH_COMMAND; "

// captureProxy starts netproxy with a counting DNS server as its [dns]
// servers: up.test, git.test and ssh.test answer 127.0.0.1 and are allowed
// (ssh.test on port 22 only), denied.test is denied.
func captureProxy(t *testing.T) (*Proxy, *countingDNS) {
	t.Helper()
	dns := startCountingDNS(t, map[string][]string{
		"up.test": {"127.0.0.1"}, "git.test": {"127.0.0.1"}, "ssh.test": {"127.0.0.1"}, "denied.test": {"127.0.0.1"},
	})
	p := dnsProxy(t, ProxyConfig{
		AllowLocal: true,
		Domains: [][2]string{
			{"up.test", "allow"}, {"git.test", "allow"}, {"ssh.test:22", "allow"}, {"denied.test", "deny"},
		},
		Extra: fmt.Sprintf("[dns]\ntimeout = \"2s\"\nservers = [%q]\n", dns.Addr),
	})
	return p, dns
}

// buildNoProxyGo builds a Go client whose Transport ignores the proxy
// variables (Proxy: nil) and skips certificate checks (self-signed test
// upstream); it prints the body of its argument URL.
func buildNoProxyGo(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "main.go")
	err := os.WriteFile(src, []byte(`package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	c := &http.Client{Transport: &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	r, err := c.Get(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	b, _ := io.ReadAll(r.Body)
	fmt.Print(string(b))
}
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "noproxy-go")
	cmd := exec.Command("go", "build", "-o", bin, src)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the Go client: %v\n%s", err, out)
	}
	return bin
}

// startBannerServer listens on 127.0.0.1:22 (root) and greets like an SSH
// server does: the server speaks first, so the banner must cross capture
// before the client sent a byte.
func startBannerServer(t *testing.T) { startBannerOn(t, "127.0.0.1:22") }

// startBannerOn is startBannerServer on addr; it returns the port.
func startBannerOn(t *testing.T, addr string) int {
	t.Helper()
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatalf("listen on %s (the ssh-like upstream; run as root, with no sshd there): %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprint(c, "SSH-2.0-capture-e2e\r\n")
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "got %s", line)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestSandboxCaptureRealClients: every client below ignores (or has lost)
// the proxy variables; each reaches its allowed upstream through capture.
func TestSandboxCaptureRealClients(t *testing.T) {
	for _, tool := range []string{"node", "python3", "curl", "git", "nc", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required (scripts/install-test-deps.sh)", tool)
		}
	}
	p, dns := captureProxy(t)
	plain := StartUpstream(t, false)
	secure := StartUpstream(t, true)
	gitRoot := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", "--bare", "-b", "main", filepath.Join(gitRoot, "r.git")).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	seed := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", seed},
		{"-C", seed, "-c", "user.name=e2e", "-c", "user.email=e2e@test", "commit", "-q", "--allow-empty", "-m", "captured"},
		{"-C", seed, "push", "-q", filepath.Join(gitRoot, "r.git"), "main"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	gitSrv := startGitServer(t, gitRoot)
	startBannerServer(t)
	dir := sbxDir(t)
	buildNoProxyGo(t, dir) // ./noproxy-go in the workdir

	pyGet := `import socket,sys
fam = socket.AF_INET6 if sys.argv[3] == "6" else socket.AF_INET
addr = socket.getaddrinfo(sys.argv[1], int(sys.argv[2]), fam, socket.SOCK_STREAM)[0][4]
s = socket.create_connection(addr[:2], timeout=10)
s.sendall(b"GET /hello HTTP/1.0\r\nHost: " + sys.argv[1].encode() + b"\r\n\r\n")
print(s.makefile("rb").read().decode().split("\r\n\r\n", 1)[1])`
	if err := os.WriteFile(filepath.Join(dir, "get.py"), []byte(pyGet), 0o644); err != nil {
		t.Fatal(err)
	}
	steps := []struct{ name, cmd string }{
		{"resolv.conf points at the sandbox resolver", `grep -q '^nameserver 127.0.0.53' /etc/resolv.conf`},
		{"node fetch: Debian Node 20 ignores NODE_USE_ENV_PROXY", fmt.Sprintf(
			`NODE_TLS_REJECT_UNAUTHORIZED=0 node -e 'fetch(process.argv[1]).then(r=>r.text()).then(t=>{if(t!==%q)process.exit(3)}).catch(e=>{console.error(e);process.exit(4)})' %s 2>/dev/null`,
			Hello, secure.URL("up.test", "/hello"))},
		{"python socket + raw GET (IPv4)", fmt.Sprintf(`python3 get.py up.test %d 4 | grep -qx %q`, plain.Port, Hello)},
		{"python socket + raw GET (IPv6 pool address)", fmt.Sprintf(`python3 get.py up.test %d 6 | grep -qx %q`, plain.Port, Hello)},
		{"go Transport.Proxy=nil (HTTPS)", fmt.Sprintf(`./noproxy-go %s | grep -qx %q`, secure.URL("up.test", "/hello"), Hello)},
		{"curl --noproxy HTTP", fmt.Sprintf(`curl -sS -m 10 --noproxy '*' %s | grep -qx %q`, plain.URL("up.test", "/hello"), Hello)},
		{"curl --noproxy HTTPS", fmt.Sprintf(`curl -sSk -m 10 --noproxy '*' %s | grep -qx %q`, secure.URL("up.test", "/hello"), Hello)},
		{"git clone over HTTPS", fmt.Sprintf(`GIT_SSL_NO_VERIFY=1 GIT_TERMINAL_PROMPT=0 git clone -q https://git.test:%d/r.git /tmp/clone && git -C /tmp/clone log --format=%%s | grep -qx captured`, gitSrv.Port)},
		{"nc to ssh.test:22 (server speaks first)", `printf 'hi\n' | timeout 10 nc ssh.test 22 | tr -d '\r' | grep -qx 'SSH-2.0-capture-e2e'`},
	}
	var script strings.Builder
	script.WriteString(unsetProxy)
	for i, s := range steps {
		fmt.Fprintf(&script, "( %s ) || { echo 'FAILED: %s' >&2; exit %d; }\n", s.cmd, s.name, 20+i)
	}
	env := append(p.Env(), "HOME="+dir)
	r, code, stderr := sbxRun(t, env, dir, "--control", p.Control, "--", "sh", "-c", script.String())
	if code != 0 || r.ExitCode != 0 {
		t.Fatalf("exit %d/%d: %s\nstderr: %s %s\nsignals %v", code, r.ExitCode, r.Stdout, r.Stderr, stderr, r.Sandbox.Signals)
	}
	if plain.Hits() != 3 || secure.Hits() != 3 {
		t.Errorf("upstream hits plain %d (want 3), TLS %d (want 3)", plain.Hits(), secure.Hits())
	}
	// Every one went through netproxy as the execution: its audit names it.
	for _, host := range []string{"up.test", "git.test", "ssh.test"} {
		lines := sbxAuditLines(t, p, host)
		if len(lines) == 0 {
			t.Errorf("no audit line for %s: capture did not go through netproxy", host)
		}
		for _, l := range lines {
			if l["execution_id"] != r.ExecutionID {
				t.Errorf("%s audit line execution_id %v, want %s", host, l["execution_id"], r.ExecutionID)
			}
		}
	}
	if dns.Queries("up.test") == 0 {
		t.Errorf("netproxy never resolved up.test: the connection did not reach it by name")
	}
}

// TestSandboxCaptureRefusals: a denied name is refused (reset), listed in
// network_denials, and never resolved by anyone; other DNS types are
// REFUSED; UDP anywhere but the resolver is refused; capture off leaves
// such programs with no network at all.
func TestSandboxCaptureRefusals(t *testing.T) {
	p, dns := captureProxy(t)
	up := StartUpstream(t, false)
	dir := sbxDir(t)
	probe := `import socket,struct,sys,errno
def query(qtype):
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    for part in b"up.test".split(b"."):
        q += bytes([len(part)]) + part
    q += b"\x00" + struct.pack(">HH", qtype, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
    s.sendto(q, ("127.0.0.53", 53))
    return s.recv(512)[3] & 0x0f
assert query(16) == 5, "TXT not REFUSED"
assert query(1) == 0, "A not answered"
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
try:
    u.connect(("192.0.2.1", 9)); u.send(b"x"); u.recv(10)
    sys.exit("UDP to port 9 was not refused")
except socket.timeout:
    sys.exit("UDP to port 9 was silently dropped, not refused")
except OSError as e:
    assert e.errno in (errno.EPERM, errno.ECONNREFUSED, errno.EHOSTUNREACH), e
try:
    socket.create_connection(("denied.test", 443), timeout=10).recv(1)
    sys.exit("denied.test: connection not reset")
except (ConnectionResetError, ConnectionRefusedError, BrokenPipeError):
    pass
print("refusals held")`
	if err := os.WriteFile(filepath.Join(dir, "probe.py"), []byte(probe), 0o644); err != nil {
		t.Fatal(err)
	}
	script := unsetProxy + fmt.Sprintf(`python3 probe.py || exit 30
curl -sS -m 10 --noproxy '*' http://denied.test:%d/hello && exit 31
exit 7`, up.Port)
	env := append(p.Env(), "HOME="+dir)
	r, _, stderr := sbxRun(t, env, dir, "--control", p.Control, "--", "sh", "-c", script)
	if r.ExitCode != 7 || !strings.Contains(r.Stdout, "refusals held") {
		t.Fatalf("exit %d (30 probe failed, 31 denied.test reached): %s\nstderr: %s %s", r.ExitCode, r.Stdout, r.Stderr, stderr)
	}
	found := false
	for _, d := range r.NetworkDenials {
		found = found || d.Host == "denied.test"
	}
	if !found {
		t.Errorf("network_denials %+v lacks denied.test", r.NetworkDenials)
	}
	if n := dns.Queries("denied.test"); n != 0 {
		t.Errorf("denied.test was resolved %d times: capture must not cause a lookup (SPEC §3.4)", n)
	}
	if up.Hits() != 0 {
		t.Errorf("upstream hits %d, want 0", up.Hits())
	}

	// --capture off: the same program has no network at all.
	r, _, stderr = sbxRun(t, env, dir, "--control", p.Control, "--capture", "off", "--", "sh", "-c",
		unsetProxy+fmt.Sprintf(`curl -sS -m 5 --noproxy '*' http://up.test:%d/hello && exit 41; exit 0`, up.Port))
	if r.ExitCode != 0 || up.Hits() != 0 {
		t.Fatalf("--capture off: exit %d (41: reached without capture), hits %d: %s %s", r.ExitCode, up.Hits(), r.Stderr, stderr)
	}
}

// TestSandboxCaptureFlags: --capture on is refused where it cannot work
// (exit 2, before anything runs); doctor reports capture working here and
// says which Node versions honour NODE_USE_ENV_PROXY.
func TestSandboxCaptureFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--capture", "on", "--tier", "landlock", "--", "true"}, "unavailable in the landlock tier"},
		{[]string{"run", "--capture", "on", "--network", "none", "--", "true"}, "needs --network proxied"},
		{[]string{"run", "--capture", "maybe", "--", "true"}, "want on or off"},
	} {
		out, err := exec.Command(ExecwrapBin(t), c.args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), c.want) {
			t.Errorf("execwrap %v: %v, want exit 2 naming %q\n%s", c.args, err, c.want, out)
		}
	}
	out, err := exec.Command(ExecwrapBin(t), "doctor").Output()
	if err != nil {
		t.Fatalf("doctor: %v\n%s", err, out)
	}
	for _, want := range []string{"transparent capture (--capture)    works", "Node >= 24.5", "22.21"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("doctor lacks %q:\n%s", want, out)
		}
	}
}
