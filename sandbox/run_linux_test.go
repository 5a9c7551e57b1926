package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/netproxy/netproxy/attribution"
)

// The test binary doubles as the re-exec init.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "__sandbox-init" {
		os.Exit(InitMain())
	}
	if deny := os.Getenv("SANDBOX_TEST_DENY"); deny != "" {
		// Simulate a host without user namespaces (and maybe Landlock), the
		// way a container seccomp profile does it.
		if err := denyForTest(deny == "userns+landlock"); err != nil {
			fmt.Fprintln(os.Stderr, "SANDBOX_TEST_DENY:", err)
			os.Exit(3)
		}
	}
	os.Exit(m.Run())
}

// denyForTest installs, on every thread, a filter that fails clone3 with
// ENOSYS (so callers fall back to clone), clone with CLONE_NEWUSER with
// EPERM and, optionally, every landlock syscall with ENOSYS.
func denyForTest(landlockToo bool) error {
	const (
		cloneNewUser                                           = 0x10000000
		enosys                                                 = 38
		sysLandlockCreate, sysLandlockAdd, sysLandlockRestrict = 444, 445, 446
	)
	if runtime.GOARCH != "amd64" {
		return fmt.Errorf("the simulation filter is amd64-only")
	}
	var a asm
	a.op(bpf.LoadAbsolute{Off: seccompDataNr, Size: 4})
	a.jeq(435 /* clone3 */, "enosys", "")
	if landlockToo {
		a.jeq(sysLandlockCreate, "enosys", "")
		a.jeq(sysLandlockAdd, "enosys", "")
		a.jeq(sysLandlockRestrict, "enosys", "")
	}
	a.jeq(56 /* clone */, "clone", "")
	a.op(bpf.RetConstant{Val: seccompRetAllow})
	a.label("clone")
	a.op(bpf.LoadAbsolute{Off: seccompDataArg0, Size: 4})
	a.op(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: cloneNewUser})
	a.jeq(cloneNewUser, "eperm", "")
	a.op(bpf.RetConstant{Val: seccompRetAllow})
	a.label("eperm")
	a.op(bpf.RetConstant{Val: seccompRetErrno | errnoEPERM})
	a.label("enosys")
	a.op(bpf.RetConstant{Val: seccompRetErrno | enosys})
	raw, err := a.assemble()
	if err != nil {
		return err
	}
	filt := make([]unix.SockFilter, len(raw))
	for i, in := range raw {
		filt[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filt)), Filter: &filt[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return e
	}
	return nil
}

// TestSandboxAutoDegrades re-runs itself on a simulated host without user
// namespaces: auto must fall back to the landlock tier and say why; with
// Landlock gone too it must fail closed naming both causes.
func TestSandboxAutoDegrades(t *testing.T) {
	if os.Getenv("SANDBOX_TEST_DENY") != "" {
		wd := workdir(t)
		// A subfolder: the landlock tier makes nothing new at the
		// workdir's top.
		if err := os.Mkdir(filepath.Join(wd, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		res, err := Run(context.Background(), Spec{Cwd: wd, Argv: sh("touch sub/in && touch /etc/execwrap-degraded"), Kind: KindWorkspaceWrite,
			Network: NetworkNone, Tier: TierAuto, Stderr: &out, Env: []string{"PATH=/usr/bin:/bin"}, Timeout: 10 * time.Second})
		switch os.Getenv("SANDBOX_TEST_DENY") {
		case "userns":
			if err != nil {
				t.Fatalf("auto did not degrade: %v", err)
			}
			if res.Tier != TierLandlock || len(res.Signals) == 0 || !strings.HasPrefix(res.Signals[0], "degraded:") {
				t.Fatalf("tier %s signals %v", res.Tier, res.Signals)
			}
			if res.ExitCode == 0 || !strings.Contains(out.String(), "/etc/execwrap-degraded") || !strings.Contains(out.String(), "Permission denied") {
				t.Fatalf("degraded tier let /etc be written: exit %d %s", res.ExitCode, out.String())
			}
			if _, serr := os.Stat(filepath.Join(wd, "sub", "in")); serr != nil {
				t.Fatalf("degraded tier: the workdir's subfolder was not writable: %v", serr)
			}
			fmt.Println("DEGRADED-OK", res.Signals[0])
		case "userns+landlock":
			var ue *UnavailableError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), "CLONE_NEWUSER") || !strings.Contains(err.Error(), "Landlock ABI 0") {
				t.Fatalf("want a fail-closed UnavailableError naming both causes, got %v", err)
			}
			if _, serr := os.Stat(filepath.Join(wd, "sub", "in")); serr == nil {
				t.Fatal("the command ran without any sandbox")
			}
			fmt.Println("UNAVAILABLE-OK", err)
		}
		return
	}
	if LandlockABI() < 4 {
		skipOffCI(t, "landlock ABI %d < 4: the degraded tier cannot be exercised here", LandlockABI())
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for deny, want := range map[string]string{"userns": "DEGRADED-OK", "userns+landlock": "UNAVAILABLE-OK"} {
		cmd := exec.Command(self, "-test.run", "^TestSandboxAutoDegrades$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "SANDBOX_TEST_DENY="+deny)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("%s: %v\n%s", deny, err, out)
		}
		t.Logf("%s: %s", deny, strings.TrimSpace(string(out)))
	}
	os.Remove("/etc/execwrap-degraded")
}

type runOut struct {
	Result
	Stdout, Stderr string
}

func sandboxRun(t *testing.T, s Spec) runOut {
	t.Helper()
	var out, errb bytes.Buffer
	if s.Stdout == nil {
		s.Stdout = &out
	}
	if s.Stderr == nil {
		s.Stderr = &errb
	}
	if s.Env == nil {
		s.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/nonexistent", "LANG=C"}
	}
	if s.Kind == "" {
		s.Kind = KindWorkspaceWrite
	}
	if s.Network == "" {
		s.Network = NetworkNone
	}
	if s.Timeout == 0 {
		s.Timeout = 20 * time.Second
	}
	if s.Tier == "" {
		s.Tier = TierNamespaces
	}
	res, err := Run(context.Background(), s)
	if err != nil {
		t.Fatalf("Run(%q): %v\nstderr: %s", s.Argv, err, errb.String())
	}
	return runOut{res, out.String(), errb.String()}
}

// workdir is a directory the current (possibly unprivileged) user owns.
func workdir(t *testing.T) string {
	d := t.TempDir()
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func TestSandboxFilesystem(t *testing.T) {
	wd := workdir(t)
	if err := os.WriteFile(filepath.Join(os.TempDir(), "execwrap-host-marker"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := sandboxRun(t, Spec{Cwd: wd, Argv: sh(`
echo hi > inside.txt || exit 10
if touch /etc/execwrap-escape 2>/dev/null; then exit 11; fi
if [ -e /tmp/execwrap-host-marker ]; then exit 12; fi
touch /tmp/private || exit 13
touch /dev/shm/private || exit 14
grep -q '^PPid:	1$' /proc/$$/status || exit 15
echo data > /dev/null || exit 16
grep -q '^CapEff:	0000000000000000' /proc/self/status || exit 17
grep -q '^NoNewPrivs:	1' /proc/self/status || exit 18
grep -q '^Seccomp:	2' /proc/self/status || exit 19
[ "$(hostname)" = sandbox ] || exit 20
exit 3`)})
	if r.ExitCode != 3 {
		t.Fatalf("exit = %d, stderr: %s (10 write workdir, 11 /etc writable, 12 host /tmp visible, 13/14 private tmp, 15 pid ns, 16 /dev/null, 17 caps, 18 nnp, 19 seccomp, 20 uts)", r.ExitCode, r.Stderr)
	}
	if b, err := os.ReadFile(filepath.Join(wd, "inside.txt")); err != nil || string(b) != "hi\n" {
		t.Fatalf("workdir write did not reach the host: %q %v", b, err)
	}
	if _, err := os.Stat("/etc/execwrap-escape"); err == nil {
		os.Remove("/etc/execwrap-escape")
		t.Fatal("the sandbox wrote to the host's /etc")
	}
	if r.Tier != TierNamespaces || r.LandlockABI == 0 && LandlockABI() > 0 {
		t.Fatalf("tier %s, landlock ABI %d (kernel %d)", r.Tier, r.LandlockABI, LandlockABI())
	}
}

func TestSandboxOutsideWriteIsReadOnlyError(t *testing.T) {
	wd := workdir(t)
	r := sandboxRun(t, Spec{Cwd: wd, Argv: sh(`touch /etc/execwrap-x`)})
	if r.ExitCode == 0 || !strings.Contains(r.Stderr, "Read-only file system") {
		t.Fatalf("exit %d stderr %q: want EROFS", r.ExitCode, r.Stderr)
	}
	if d := ClassifyDenial(true, r.ExitCode, r.TimedOut, []byte(r.Stdout), []byte(r.Stderr)); !d.Denied {
		t.Fatalf("EROFS not classified as a sandbox denial: %+v", d)
	}
}

func TestSandboxReadOnlyKind(t *testing.T) {
	wd := workdir(t)
	r := sandboxRun(t, Spec{Cwd: wd, Kind: KindReadOnly, Argv: sh(`ls >/dev/null || exit 4; touch x 2>/dev/null && exit 5; touch /tmp/y || exit 6; exit 0`)})
	if r.ExitCode != 0 {
		t.Fatalf("exit %d (4 cwd unreadable, 5 cwd writable, 6 private tmp), stderr %s", r.ExitCode, r.Stderr)
	}
}

func TestSandboxWritableRootAndProtectedGit(t *testing.T) {
	wd, extra := workdir(t), workdir(t)
	for _, d := range []string{filepath.Join(wd, ".git"), filepath.Join(wd, ".git", "hooks")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(wd, ".hg")); err != nil {
		t.Fatal(err)
	}
	r := sandboxRun(t, Spec{Cwd: wd, WritableRoots: []string{extra}, Argv: sh(`
echo x > ` + extra + `/ok || exit 4
touch .git/config 2>/dev/null && exit 5
touch .git/hooks/pre-commit 2>/dev/null && exit 6
rm -rf .git 2>/dev/null; [ -d .git ] || exit 7
rm .hg 2>/dev/null && exit 8
touch src.txt || exit 9
exit 0`)})
	if r.ExitCode != 0 {
		t.Fatalf("exit %d (4 writable root, 5/6 .git writable, 7 .git removed, 8 protected symlink removed, 9 workdir), stderr %s", r.ExitCode, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(extra, "ok")); err != nil {
		t.Fatal(err)
	}
}

// The remount attack of reference sandbox.md Part B §5c: with all
// capabilities dropped, remounting / read-write must fail.
func TestSandboxRemountAttackFails(t *testing.T) {
	wd := workdir(t)
	r := sandboxRun(t, Spec{Cwd: wd, Argv: sh(`
mount -o remount,rw / 2>/dev/null && exit 4
mount -o remount,bind,rw / 2>/dev/null && exit 5
umount /tmp 2>/dev/null && exit 6
unshare -Urm sh -c 'mount -o remount,rw /' 2>/dev/null && exit 7
touch /etc/execwrap-remount 2>/dev/null && exit 8
exit 0`)})
	if r.ExitCode != 0 {
		os.Remove("/etc/execwrap-remount")
		t.Fatalf("exit %d (4/5 remount, 6 umount, 7 nested userns, 8 write), stderr %s", r.ExitCode, r.Stderr)
	}
}

func TestSandboxSeccompSocketFamilies(t *testing.T) {
	wd := workdir(t)
	r := sandboxRun(t, Spec{Cwd: wd, Argv: []string{"perl", "-e", `
use Socket;
socket(my $u, PF_UNIX, SOCK_STREAM, 0) and exit 4;
$!{EPERM} or exit 5;
socket(my $n, 16, SOCK_RAW, 0) and exit 6;
socket(my $i, PF_INET, SOCK_STREAM, 0) or exit 7;
socketpair(my $a, my $b, AF_UNIX, SOCK_STREAM, 0) or exit 8;
exit 0;`}})
	if r.ExitCode != 0 {
		t.Fatalf("exit %d (4 AF_UNIX allowed, 5 not EPERM, 6 netlink allowed, 7 AF_INET denied, 8 socketpair denied), stderr %s", r.ExitCode, r.Stderr)
	}
}

func TestSandboxExitAndSignal(t *testing.T) {
	wd := workdir(t)
	r := sandboxRun(t, Spec{Cwd: wd, Argv: sh(`kill -TERM $$`)})
	if r.ExitCode != 143 || r.Signal != "SIGTERM" {
		t.Fatalf("got exit %d signal %q, want 143 SIGTERM", r.ExitCode, r.Signal)
	}
	r = sandboxRun(t, Spec{Cwd: wd, Argv: []string{"no-such-command-xyz"}})
	if r.ExitCode != 127 {
		t.Fatalf("missing command: exit %d, want 127", r.ExitCode)
	}
}

func TestSandboxSignalForwarding(t *testing.T) {
	wd := workdir(t)
	sigs := make(chan Signal, 1)
	go func() {
		// Wait until the command is running (it writes the marker).
		for range 1500 {
			if _, err := os.Stat(filepath.Join(wd, "started")); err == nil {
				sigs <- Signal(15)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	r := sandboxRun(t, Spec{Cwd: wd, Signals: sigs, Argv: sh(`touch started; sleep 30`)})
	if r.ExitCode != 143 && r.ExitCode != 128+15 {
		t.Fatalf("exit %d signal %q: SIGTERM was not forwarded", r.ExitCode, r.Signal)
	}
}

// tickFile is written by a grandchild every 20 ms; after the timeout it must
// stop changing.
func assertTickStops(t *testing.T, tick string) {
	t.Helper()
	b1, _ := os.ReadFile(tick)
	time.Sleep(300 * time.Millisecond)
	b2, _ := os.ReadFile(tick)
	if len(b1) == 0 {
		t.Fatal("the grandchild never ran")
	}
	if !bytes.Equal(b1, b2) {
		t.Fatal("a grandchild survived the timeout")
	}
}

func TestSandboxTimeoutKillsGrandchildren(t *testing.T) {
	for _, tier := range []Tier{TierNamespaces, TierLandlock} {
		t.Run(string(tier), func(t *testing.T) {
			if tier == TierLandlock && LandlockABI() < 4 {
				skipOffCI(t, "landlock ABI %d < 4: the landlock tier is unavailable here (doctor reports it)", LandlockABI())
			}
			wd := workdir(t)
			// In a subfolder: the landlock tier makes nothing new at a
			// writable root's top (it protects .git & co. there).
			if err := os.Mkdir(filepath.Join(wd, "work"), 0o755); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			r := sandboxRun(t, Spec{Cwd: wd, Tier: tier, Timeout: 3 * time.Second, Argv: sh(
				`(sh -c 'while :; do date +%s%N > work/tick.new; mv -f work/tick.new work/tick; sleep 0.02; done' &) ; while [ ! -s work/tick ]; do sleep 0.01; done; sleep 30`)})
			if !r.TimedOut || r.ExitCode != TimeoutExitCode {
				t.Fatalf("timed_out %v exit %d", r.TimedOut, r.ExitCode)
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("the timeout took %v", time.Since(start))
			}
			assertTickStops(t, filepath.Join(wd, "work", "tick"))
		})
	}
}

func TestSandboxNetworkNone(t *testing.T) {
	wd := workdir(t)
	r := sandboxRun(t, Spec{Cwd: wd, Argv: sh(`
curl -sS -m 3 http://1.1.1.1/ >/dev/null 2>&1 && exit 4
n=$(grep -c : /proc/net/dev); [ "$n" = 1 ] || exit 5
exit 0`)})
	if r.ExitCode != 0 {
		t.Fatalf("exit %d (4 direct egress worked, 5 interfaces besides lo), stderr %s", r.ExitCode, r.Stderr)
	}
}

// framingProxy is a minimal stand-in for netproxy's HTTP listener: it reads
// the attribution frame with attribution.ReadFrame, records the token and
// answers every proxied request with 200 "via-proxy".
type framingProxy struct {
	ln       net.Listener
	mu       sync.Mutex
	tokens   []string
	unframed int
}

func startFramingProxy(t testing.TB) *framingProxy {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &framingProxy{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *framingProxy) serve(c net.Conn) {
	defer c.Close()
	tok, framed, err := attribution.ReadFrame(c, 3*time.Second)
	p.mu.Lock()
	if framed && err == nil {
		p.tokens = append(p.tokens, tok)
	} else {
		p.unframed++
	}
	p.mu.Unlock()
	if err != nil || !framed {
		return
	}
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	io.Copy(io.Discard, req.Body)
	fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nvia-proxy")
}

func (p *framingProxy) seen() ([]string, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.tokens...), p.unframed
}

func TestSandboxProxiedBridge(t *testing.T) {
	for _, tier := range []Tier{TierNamespaces, TierLandlock} {
		t.Run(string(tier), func(t *testing.T) {
			if tier == TierLandlock && LandlockABI() < 4 {
				skipOffCI(t, "landlock ABI %d < 4", LandlockABI())
			}
			p := startFramingProxy(t)
			token := "tok-" + strings.Repeat("a1", 16)
			wd := workdir(t)
			port := p.ln.Addr().(*net.TCPAddr).Port
			r := sandboxRun(t, Spec{Cwd: wd, Tier: tier, Network: NetworkProxied,
				Proxy: &ProxyTarget{HTTPAddr: p.ln.Addr().String(), Token: token, WriteFrame: attribution.WriteFrame},
				Argv: sh(fmt.Sprintf(`
out=$(curl -sS -m 5 http://upstream.test/x) || exit 4
[ "$out" = via-proxy ] || exit 5
curl -sS -m 3 --noproxy '*' http://127.0.0.1:%d/ >/dev/null 2>&1 && exit 6
curl -sS -m 3 --noproxy '*' http://1.1.1.1/ >/dev/null 2>&1 && exit 7
env; cat /proc/self/environ; cat /proc/1/environ /proc/1/cmdline 2>/dev/null
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat "$f" 2>/dev/null; done
exit 0`, port))})
			if r.ExitCode != 0 {
				t.Fatalf("exit %d (4 curl through proxy failed, 5 wrong body, 6 reached the proxy port directly, 7 direct egress), stderr %s", r.ExitCode, r.Stderr)
			}
			if strings.Contains(r.Stdout, token) || strings.Contains(r.Stderr, token) {
				t.Fatal("the attribution token is visible inside the sandbox")
			}
			if !strings.Contains(r.Stdout, "http_proxy=http://127.0.0.1:") || !strings.Contains(r.Stdout, "HTTPS_PROXY=http://127.0.0.1:") {
				t.Fatalf("proxy variables missing from the sandbox env:\n%s", r.Stdout)
			}
			toks, unframed := p.seen()
			if len(toks) == 0 || toks[0] != token {
				t.Fatalf("proxy saw tokens %q (unframed %d), want %q", toks, unframed, token)
			}
			if unframed != 0 {
				t.Fatalf("%d unframed connections reached the proxy", unframed)
			}
		})
	}
}

func TestSandboxStop(t *testing.T) {
	wd := workdir(t)
	stop := make(chan struct{})
	time.AfterFunc(300*time.Millisecond, func() { close(stop) })
	r := sandboxRun(t, Spec{Cwd: wd, Stop: stop, Argv: sh(`sleep 30`)})
	if !r.Stopped || r.ExitCode != 137 {
		t.Fatalf("stopped %v exit %d", r.Stopped, r.ExitCode)
	}
}

func TestSandboxLandlockTierFilesystem(t *testing.T) {
	if LandlockABI() < 4 {
		skipOffCI(t, "landlock ABI %d < 4", LandlockABI())
	}
	wd := workdir(t)
	if err := os.Mkdir(filepath.Join(wd, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The workdir's own folder is read-only in this tier (it protects
	// .git & co.); its subfolders are writable.
	r := sandboxRun(t, Spec{Cwd: wd, Tier: TierLandlock, Argv: sh(`
echo ok > sub/in.txt || exit 4
touch /etc/execwrap-ll 2>/dev/null && exit 5
touch "$TMPDIR/t" || exit 6
curl -sS -m 3 http://1.1.1.1/ >/dev/null 2>&1 && exit 7
touch top.txt 2>/dev/null && exit 8
exit 0`)})
	if r.ExitCode != 0 {
		os.Remove("/etc/execwrap-ll")
		t.Fatalf("exit %d (4 workdir subfolder, 5 /etc writable, 6 private TMPDIR, 7 egress, 8 new entry at the workdir's top), stderr %s", r.ExitCode, r.Stderr)
	}
	if b, err := os.ReadFile(filepath.Join(wd, "sub", "in.txt")); err != nil || string(b) != "ok\n" {
		t.Fatalf("sub/in.txt on the host: %q %v", b, err)
	}
	if r.Tier != TierLandlock {
		t.Fatalf("tier %s", r.Tier)
	}
}

func TestSandboxSetupErrorFailsClosed(t *testing.T) {
	wd := workdir(t)
	r0, err := Run(context.Background(), Spec{Cwd: wd, Argv: []string{"true"}, Kind: KindWorkspaceWrite, Network: NetworkNone,
		Tier: TierNamespaces, WritableRoots: []string{"/nonexistent-root-xyz"}})
	if err == nil {
		t.Fatalf("a missing writable root must fail the setup: %+v", r0)
	}
	if _, ok := err.(*SetupError); !ok {
		t.Fatalf("want *SetupError, got %T %v", err, err)
	}
	_, err = Run(context.Background(), Spec{Cwd: wd, Argv: []string{"true"}, Kind: KindWorkspaceWrite, Network: NetworkProxied})
	if err == nil {
		t.Fatal("proxied without a registered execution must fail")
	}
	_, err = Run(context.Background(), Spec{Cwd: wd, Argv: []string{"true"}, Kind: KindReadOnly, Network: NetworkHost})
	if err == nil {
		t.Fatal("host network with a confining sandbox must fail")
	}
}

// TestSandboxUnprivileged re-runs the behaviour tests as `nobody` through
// setpriv when the suite runs as root.
func TestSandboxUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		skipOffCI(t, "already unprivileged: the other tests cover this user")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatal("setpriv (util-linux) is required to test the unprivileged path; run scripts/install-test-deps.sh")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "execwrap-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "sandbox.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "tmp")
	os.Mkdir(tmp, 0o777)
	os.Chmod(tmp, 0o1777)
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--", bin,
		"-test.run", "^(TestSandboxFilesystem|TestSandboxRemountAttackFails|TestSandboxProxiedBridge|TestSandboxTimeoutKillsGrandchildren|TestSandboxSeccompSocketFamilies|TestSandboxWritableRootAndProtectedGit)$", "-test.count=1", "-test.v")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "TMPDIR=" + tmp, "HOME=" + tmp}
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unprivileged run failed: %v\n%s", err, out)
	}
	for _, name := range []string{"TestSandboxFilesystem", "TestSandboxRemountAttackFails", "TestSandboxProxiedBridge/namespaces",
		"TestSandboxTimeoutKillsGrandchildren/namespaces", "TestSandboxSeccompSocketFamilies", "TestSandboxWritableRootAndProtectedGit"} {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("as nobody, %s did not pass:\n%s", name, out)
		}
	}
	t.Logf("as nobody:\n%s", out)
}

func TestSandboxProxyResolveFailureFailsClosed(t *testing.T) {
	wd := workdir(t)
	_, err := Run(context.Background(), Spec{Cwd: wd, Argv: sh("touch ran"), Kind: KindWorkspaceWrite, Network: NetworkProxied,
		Tier: TierNamespaces, Timeout: 10 * time.Second,
		ProxyResolve: func(context.Context) (*ProxyTarget, error) { return nil, fmt.Errorf("netproxy unreachable") }})
	if err == nil || !strings.Contains(err.Error(), "netproxy unreachable") {
		t.Fatalf("err = %v", err)
	}
	if _, serr := os.Stat(filepath.Join(wd, "ran")); serr == nil {
		t.Fatal("the command ran although the proxy could not be resolved")
	}
}

func TestSandboxProxyResolveLazy(t *testing.T) {
	p := startFramingProxy(t)
	wd := workdir(t)
	token := "lazy-" + strings.Repeat("b2", 16)
	r := sandboxRun(t, Spec{Cwd: wd, Network: NetworkProxied, Argv: sh(`curl -sS -m 5 http://x.test/`),
		ProxyResolve: func(context.Context) (*ProxyTarget, error) {
			return &ProxyTarget{HTTPAddr: p.ln.Addr().String(), Token: token, WriteFrame: attribution.WriteFrame}, nil
		}})
	if r.ExitCode != 0 || r.Stdout != "via-proxy" {
		t.Fatalf("exit %d out %q err %q", r.ExitCode, r.Stdout, r.Stderr)
	}
	if toks, _ := p.seen(); len(toks) != 1 || toks[0] != token {
		t.Fatalf("tokens %v", toks)
	}
}

// An fd execwrap inherited without close-on-exec must not reach the command.
func TestSandboxInheritedFDsDoNotLeak(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	// Clear close-on-exec on our end, as a careless parent process would.
	if _, err := unix.FcntlInt(w.Fd(), unix.F_SETFD, 0); err != nil {
		t.Fatal(err)
	}
	wd := workdir(t)
	res := sandboxRun(t, Spec{Cwd: wd, Argv: sh(`ls /proc/self/fd | tr '\n' ' '`)})
	fds := strings.Fields(res.Stdout)
	for _, fd := range fds {
		if fd != "0" && fd != "1" && fd != "2" && fd != "3" { // 3: ls's own directory fd
			t.Fatalf("the command sees fds %v", fds)
		}
	}
}

// TestSandboxProxyResolveFailureAskedOnce: execwrap's resolver hands out one
// registration outcome and would block if asked again; with two in-sandbox
// listeners a failed resolution must be remembered, not retried (a retry
// hung `execwrap run` forever when netproxy was not running).
func TestSandboxProxyResolveFailureAskedOnce(t *testing.T) {
	wd := workdir(t)
	outcome := make(chan error, 1)
	outcome <- fmt.Errorf("netproxy unreachable")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := Run(ctx, Spec{Cwd: wd, Argv: sh("touch ran"), Kind: KindWorkspaceWrite, Network: NetworkProxied,
		Tier: TierNamespaces, Timeout: 10 * time.Second,
		ProxyResolve: func(rctx context.Context) (*ProxyTarget, error) {
			select {
			case err := <-outcome:
				return nil, err
			case <-rctx.Done():
				return nil, rctx.Err()
			}
		}})
	if err == nil || !strings.Contains(err.Error(), "netproxy unreachable") {
		t.Fatalf("err = %v, want the resolver's failure", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run waited for a second resolution instead of failing closed")
	}
	if _, serr := os.Stat(filepath.Join(wd, "ran")); serr == nil {
		t.Fatal("the command ran although the proxy could not be resolved")
	}
}

// skipOffCI skips a test whose kernel feature or privilege this host lacks —
// except in CI, which runs as root on a kernel with Landlock ABI >= 4, where
// a missing capability means a broken machine, never a reason to pass.
func skipOffCI(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI must exercise this test: "+format, args...)
	}
	t.Skipf(format, args...)
}
