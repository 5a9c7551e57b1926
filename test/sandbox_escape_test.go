package test

// End-to-end reproductions of the sandbox escapes of issue 17 (terminal
// injection, host /dev, shared keyrings, MPTCP and datagram sockets in the
// landlock tier, timeout survivors, the bridge lending the execution's
// identity, missing resource limits, optional Landlock and /proc/self/fd
// re-opens, a missing .git): each runs the real execwrap binary, as root and,
// where it applies, as nobody through setpriv.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// denyLandlockEnv makes the test binary act as a launcher: it installs a
// seccomp filter that fails every landlock syscall with ENOSYS (a kernel
// without Landlock, as far as the child can tell) and executes its
// arguments. It runs from init, before TestMain.
const denyLandlockEnv = "EXECWRAP_E2E_DENY_LANDLOCK"

func init() {
	if os.Getenv(denyLandlockEnv) == "" || len(os.Args) < 2 {
		return
	}
	runtime.LockOSThread()
	if err := denyLandlockSyscalls(); err != nil {
		fmt.Fprintln(os.Stderr, denyLandlockEnv+":", err)
		os.Exit(3)
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, denyLandlockEnv+"=") {
			env = append(env, kv)
		}
	}
	err := syscall.Exec(os.Args[1], os.Args[1:], env)
	fmt.Fprintln(os.Stderr, denyLandlockEnv+": exec:", err)
	os.Exit(3)
}

func denyLandlockSyscalls() error {
	if runtime.GOARCH != "amd64" {
		return fmt.Errorf("the landlock-deny filter is amd64-only")
	}
	const allow, enosys = 0x7fff0000, 0x00050000 | 38
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 444, SkipTrue: 3},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 445, SkipTrue: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 446, SkipTrue: 1},
		bpf.RetConstant{Val: allow},
		bpf.RetConstant{Val: enosys},
	})
	if err != nil {
		return err
	}
	filt := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		filt[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	fp := unix.SockFprog{Len: uint16(len(filt)), Filter: &filt[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fp))); e != 0 {
		return e
	}
	return nil
}

// escUser is who runs execwrap in a test: root, or nobody through setpriv.
type escUser string

const (
	asRoot   escUser = "root"
	asNobody escUser = "nobody"
)

func escUsers(t *testing.T) []escUser {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI runs as root and must exercise both users")
		}
		return []escUser{asRoot} // "root" here means: the current user
	}
	return []escUser{asRoot, asNobody}
}

var (
	escBinOnce sync.Once
	escBinDir  string
	escBinErr  error
)

// escBins returns copies of execwrap and of this test binary in a folder
// nobody can read and execute.
func escBins(t *testing.T) (execwrap, self string) {
	t.Helper()
	bin := ExecwrapBin(t)
	escBinOnce.Do(func() {
		d, err := os.MkdirTemp("", "execwrap-esc-bin-")
		if err != nil {
			escBinErr = err
			return
		}
		os.Chmod(d, 0o755)
		for src, dst := range map[string]string{bin: "execwrap", os.Args[0]: "self.test"} {
			b, err := os.ReadFile(src)
			if err == nil {
				err = os.WriteFile(filepath.Join(d, dst), b, 0o755)
			}
			if err != nil {
				escBinErr = err
				return
			}
		}
		escBinDir = d
	})
	if escBinErr != nil {
		t.Fatal(escBinErr)
	}
	return filepath.Join(escBinDir, "execwrap"), filepath.Join(escBinDir, "self.test")
}

// escDir is a workdir the user owns.
func escDir(t *testing.T, u escUser) string {
	d := sbxDir(t)
	if u == asNobody {
		os.Chown(d, 65534, 65534)
	}
	return d
}

// escCmd builds the command line that runs `execwrap ARGS` as u, through
// the landlock-deny launcher when noLandlock is set.
func escCmd(t *testing.T, u escUser, noLandlock bool, dir string, args ...string) *exec.Cmd {
	t.Helper()
	ew, self := escBins(t)
	argv := append([]string{ew}, args...)
	if noLandlock {
		argv = append([]string{self}, argv...)
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + dir, "NETPROXY_HOME=" + dir, "LANG=C"}
	if u == asNobody {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Fatal("setpriv (util-linux) is required; run scripts/install-test-deps.sh")
		}
		argv = append([]string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"}, argv...)
	}
	if noLandlock {
		env = append(env, denyLandlockEnv+"=1")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, env
	return cmd
}

// escRun runs `execwrap run --json ARGS` as u and decodes the result.
func escRun(t *testing.T, u escUser, noLandlock bool, dir string, stdin io.Reader, args ...string) (sbxResult, int, string) {
	t.Helper()
	return escRunCmd(t, escCmd(t, u, noLandlock, dir, append([]string{"run", "--json"}, args...)...), stdin)
}

// escRunCmd runs a prepared `execwrap run --json` command line and decodes
// the result.
func escRunCmd(t *testing.T, cmd *exec.Cmd, stdin io.Reader) (sbxResult, int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("execwrap run: %v\n%s", err, errb.String())
	}
	var r sbxResult
	if jerr := json.Unmarshal(out.Bytes(), &r); jerr != nil {
		t.Fatalf("execwrap run --json printed no result (%v)\nstdout: %s\nstderr: %s", jerr, out.String(), errb.String())
	}
	return r, code, errb.String()
}

func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// Item 2: with stdin a terminal, TIOCSTI must not reach the caller's
// terminal (CVE-2017-5226): the command runs in its own session on a
// relayed pty, and seccomp refuses TIOCSTI/TIOCLINUX.
func TestSandboxEscapeTIOCSTI(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil {
		t.Fatal("script (bsdutils) is required to give execwrap a terminal")
	}
	for _, tc := range escTierUsers(t) {
		u, tier := tc.u, tc.tier
		t.Run(tier+"/"+string(u), func(t *testing.T) {
			dir := escDir(t, u)
			ew, _ := escBins(t)
			writeScript(t, dir, "inject.pl", `
require "sys/ioctl.ph";
my $ok = 0;
for my $c (split //, "echo INJECTED-\$((6*7))\n") { $ok++ if ioctl(STDIN, 0x5412, $c); }
print "TIOCSTI:", ($ok ? "worked" : "refused:$!"), "\n";
open(my $st, "<", "/proc/self/stat"); my @f = split / /, <$st>;
print "SESSION:", ($f[5] == $$ ? "own" : "caller"), "\n";
print "TTY:", (-t STDIN ? "yes" : "no"), "\n";
my $other = 0;
my $own = readlink("/proc/self/fd/0");
for my $n (0..63) { my $p = "/dev/pts/$n"; next if $p eq $own or !-e $p; $other++ if open(my $h, ">", $p) or open(my $r, "<", $p); }
print "OTHER-TTYS:", ($other ? "open" : "closed"), "\n";
`)
			// The outer shell reads one line after execwrap returns: an
			// injected line would be read (and run) by it.
			inner := ew + " run --tier " + tier + " --network none -- perl ./inject.pl; read -t 2 line; echo \"OUTER-READ:[$line]\"; eval \"$line\""
			argv := []string{script, "-qec", inner, "/dev/null"}
			if u == asNobody {
				argv = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"}, argv...)
			}
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir = dir
			cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "NETPROXY_HOME=" + dir, "SHELL=/bin/bash", "TERM=dumb"}
			stdin, _ := cmd.StdinPipe() // held open: script exits when the shell does
			defer stdin.Close()
			var out SyncBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { <-ctx.Done(); cmd.Process.Kill() }()
			cmd.Wait()
			o := out.String()
			if strings.Contains(o, "INJECTED-42") {
				t.Fatalf("TIOCSTI injected a command into the caller's terminal:\n%s", o)
			}
			for _, want := range []string{"TIOCSTI:refused", "SESSION:own", "TTY:yes", "OTHER-TTYS:closed", "OUTER-READ:[]"} {
				if !strings.Contains(o, want) {
					t.Fatalf("output lacks %q:\n%s", want, o)
				}
			}
		})
	}
}

type escTierUser struct {
	tier string
	u    escUser
}

func escTierUsers(t *testing.T) []escTierUser {
	var out []escTierUser
	for _, tier := range []string{"namespaces", "landlock"} {
		for _, u := range escUsers(t) {
			out = append(out, escTierUser{tier, u})
		}
	}
	return out
}

// The relayed pty still carries what the user types to the command, which
// sees a terminal of its own (item 2's relay must not break interactive use).
func TestSandboxTerminalRelay(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil {
		t.Fatal("script (bsdutils) is required to give execwrap a terminal")
	}
	for _, tier := range []string{"namespaces", "landlock"} {
		t.Run(tier, func(t *testing.T) {
			dir := sbxDir(t)
			ew, _ := escBins(t)
			cmd := exec.Command(script, "-qec", ew+" run --tier "+tier+" --network none -- sh -c 'tty; read x; echo \"GOT-$x\"'", "/dev/null")
			cmd.Dir = dir
			cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "NETPROXY_HOME=" + dir, "SHELL=/bin/sh", "TERM=dumb"}
			stdin, _ := cmd.StdinPipe()
			var out SyncBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(15 * time.Second)
			for !strings.Contains(out.String(), "/dev/pts/") && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			io.WriteString(stdin, "typed-line\n")
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("no exit:\n%s", out.String())
			}
			stdin.Close()
			if !strings.Contains(out.String(), "GOT-typed-line") {
				t.Fatalf("typed input did not reach the command:\n%s", out.String())
			}
			if tier == "namespaces" && !strings.Contains(out.String(), "/dev/pts/0") {
				t.Fatalf("the command's terminal is not its own devpts instance's first pty:\n%s", out.String())
			}
		})
	}
}

// Item 3: the sandbox has a minimal /dev of its own, with a new devpts
// instance, not the host's.
func TestSandboxEscapeHostDev(t *testing.T) {
	for _, u := range escUsers(t) {
		t.Run(string(u), func(t *testing.T) {
			dir := escDir(t, u)
			writeScript(t, dir, "dev.sh", `
for d in kmsg kvm loop0 loop-control tty1 tty0 net/tun fuse mem sda vda console; do
  [ -e /dev/$d ] && { echo "HOST-DEV:$d"; exit 4; }
done
ls /dev/pts | grep -qv '^ptmx$' && { echo "HOST-PTS:$(ls /dev/pts)"; exit 5; }
for d in null zero full random urandom tty; do [ -c /dev/$d ] || { echo "MISSING:$d"; exit 6; }; done
echo x > /dev/null || exit 7
head -c 4 /dev/urandom | wc -c | grep -q 4 || exit 8
[ -e /dev/ptmx ] || exit 9
echo x > /dev/shm/f || exit 10
touch /dev/newnode 2>/dev/null && exit 11
perl -e 'open(my $m, "+<", "/dev/ptmx") or exit 1' || exit 12
exit 0`)
			r, code, stderr := escRun(t, u, false, dir, nil, "--network", "none", "--", "sh", "./dev.sh")
			if code != 0 {
				t.Fatalf("exit %d (4 host device, 5 host pts, 6 missing device, 7-8 null/urandom, 9 ptmx, 10 shm, 11 /dev writable, 12 ptmx unusable)\nstdout %s\nstderr %s %s", code, r.Stdout, r.Stderr, stderr)
			}
		})
	}
}

// Item 4: the caller's session keyring is not shared, and the keyring
// syscalls are refused.
func TestSandboxEscapeKeyring(t *testing.T) {
	for _, u := range escUsers(t) {
		t.Run(string(u), func(t *testing.T) {
			dir := escDir(t, u)
			ew, _ := escBins(t)
			// The launcher joins a fresh session keyring, adds a host key,
			// runs execwrap, then looks for a key planted inside.
			writeScript(t, dir, "keys.pl", `
my ($type, $desc, $payload, $planted) = ("user", "host-key", "hostsecret", "planted-key");
syscall(250, 1, 0) >= 0 or die "join: $!";               # KEYCTL_JOIN_SESSION_KEYRING(NULL)
my $id = syscall(248, $type, $desc, $payload, 10, -3); # add_key(@s)
$id > 0 or die "add_key: $!";
system($ARGV[0], "run", "--network", "none", "--", "perl", "./inner.pl", $id);
my $found = syscall(250, 10, -3, $type, $planted, 0); # KEYCTL_SEARCH
print "PLANTED-ON-HOST:", ($found > 0 ? "yes" : "no"), "\n";
`)
			writeScript(t, dir, "inner.pl", `
my $buf = "\0" x 64;
my $n = syscall(250, 11, $ARGV[0]+0, $buf, 64);             # KEYCTL_READ host key
print "READ-HOST-KEY:", ($n > 0 ? substr($buf, 0, $n) : "refused:$!"), "\n";
my ($type, $desc, $payload) = ("user", "planted-key", "x");
my $p = syscall(248, $type, $desc, $payload, 1, -3);
print "ADD-KEY:", ($p > 0 ? "worked" : "refused:$!"), "\n";
my $s = syscall(250, 0, -3, 0);                               # KEYCTL_GET_KEYRING_ID @s
print "SESSION-KEYRING:", ($s > 0 ? $s : "refused:$!"), "\n";
`)
			cmd := escCmd(t, u, false, dir)
			cmd.Path, cmd.Args = "/usr/bin/perl", []string{"perl", "./keys.pl", ew}
			if u == asNobody {
				cmd.Path, cmd.Args = "/usr/bin/setpriv", []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "perl", "./keys.pl", ew}
			}
			out, err := cmd.CombinedOutput()
			o := string(out)
			if err != nil {
				t.Fatalf("%v\n%s", err, o)
			}
			if strings.Contains(o, "hostsecret") || !strings.Contains(o, "READ-HOST-KEY:refused") {
				t.Fatalf("the host key was readable inside:\n%s", o)
			}
			if !strings.Contains(o, "ADD-KEY:refused") || !strings.Contains(o, "PLANTED-ON-HOST:no") || !strings.Contains(o, "SESSION-KEYRING:refused") {
				t.Fatalf("keyring syscalls allowed or a key planted inside reached the host:\n%s", o)
			}
		})
	}
}

// Item 5: in the landlock tier (and the namespaces tier), MPTCP and any
// non-TCP stream protocol are refused, and AF_UNIX only exists as a
// stream/seqpacket socketpair.
func TestSandboxEscapeSocketProtocols(t *testing.T) {
	p := StartProxy(t, StdConfig())
	up := StartUpstream(t, false)
	// nobody cannot reach netproxy's (root-only) control socket: its run
	// uses --network none, where the namespaces tier still allows AF_INET.
	cases := []struct {
		tier    string
		u       escUser
		network string
	}{{"landlock", asRoot, "proxied"}, {"namespaces", asRoot, "proxied"}}
	if len(escUsers(t)) > 1 {
		cases = append(cases, struct {
			tier    string
			u       escUser
			network string
		}{"namespaces", asNobody, "none"})
	}
	for _, c := range cases {
		tier, u := c.tier, c.u
		{
			t.Run(tier+"/"+string(u), func(t *testing.T) {
				dir := escDir(t, u)
				writeScript(t, dir, "sock.pl", fmt.Sprintf(`
use Socket;
my $r = "";
if (socket(my $m, PF_INET, SOCK_STREAM, 262)) {
  $r .= "MPTCP:created ";
  $r .= "MPTCP:connected " if connect($m, pack_sockaddr_in(%d, inet_aton("127.0.0.1")));
} else { $r .= "MPTCP:refused:$! "; }
$r .= (socket(my $s, PF_INET, SOCK_STREAM, 132) ? "SCTP:created " : "SCTP:refused ");
$r .= (socket(my $t, PF_INET, SOCK_STREAM, 6) ? "TCP6:ok " : "TCP6:refused:$! ");
$r .= (socket(my $z, PF_INET, SOCK_STREAM, 0) ? "TCP0:ok " : "TCP0:refused:$! ");
$r .= (socketpair(my $a, my $b, AF_UNIX, SOCK_DGRAM, 0) ? "PAIR-DGRAM:created " : "PAIR-DGRAM:refused ");
$r .= (socketpair(my $c, my $d, AF_UNIX, SOCK_STREAM, 0) ? "PAIR-STREAM:ok " : "PAIR-STREAM:refused:$! ");
$r .= (socketpair(my $e, my $f, AF_UNIX, SOCK_SEQPACKET, 0) ? "PAIR-SEQ:ok " : "PAIR-SEQ:refused:$! ");
$r .= (socket(my $g, PF_UNIX, SOCK_DGRAM, 0) ? "UNIX-DGRAM:created " : "UNIX-DGRAM:refused ");
print "$r\n";`, up.Port))
				r, code, stderr := escRun(t, u, false, dir, nil, "--tier", tier, "--network", c.network, "--control", p.Control, "--", "perl", "./sock.pl")
				if code != 0 {
					t.Fatalf("exit %d: %s %s %s", code, r.Stdout, r.Stderr, stderr)
				}
				for _, bad := range []string{"MPTCP:created", "SCTP:created", "PAIR-DGRAM:created", "UNIX-DGRAM:created"} {
					if strings.Contains(r.Stdout, bad) {
						t.Errorf("%s: %s", bad, r.Stdout)
					}
				}
				for _, good := range []string{"MPTCP:refused:Operation not permitted", "TCP6:ok", "TCP0:ok", "PAIR-STREAM:ok", "PAIR-SEQ:ok"} {
					if !strings.Contains(r.Stdout, good) {
						t.Errorf("want %s: %s", good, r.Stdout)
					}
				}
				if up.Hits() != 0 {
					t.Fatal("the upstream was reached directly")
				}
			})
		}
	}
}

// Item 6: in the landlock tier the timeout also kills a grandchild that
// left the process group and session (setsid).
func TestSandboxEscapeLandlockTimeoutSetsid(t *testing.T) {
	dir := sbxDir(t)
	// A subfolder: the landlock tier makes nothing new at the workdir's top.
	if err := os.Mkdir(filepath.Join(dir, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, code, _ := sbxRun(t, os.Environ(), dir, "--tier", "landlock", "--network", "none", "--timeout", "2s", "--", "sh", "-c",
		`setsid sh -c 'while :; do date +%s%N > work/tick.new; mv -f work/tick.new work/tick; sleep 0.02; done' </dev/null >/dev/null 2>&1 & while [ ! -s work/tick ]; do sleep 0.01; done; sleep 60`)
	if !r.TimedOut || code != 124 {
		t.Fatalf("timed_out %v exit %d", r.TimedOut, code)
	}
	if time.Since(start) > 15*time.Second {
		t.Fatalf("took %v", time.Since(start))
	}
	b1, _ := os.ReadFile(filepath.Join(dir, "work", "tick"))
	time.Sleep(500 * time.Millisecond)
	b2, _ := os.ReadFile(filepath.Join(dir, "work", "tick"))
	if len(b1) == 0 || !bytes.Equal(b1, b2) {
		t.Fatalf("setsid grandchild ran=%v and survived the timeout=%v", len(b1) > 0, !bytes.Equal(b1, b2))
	}
}

// Item 7: an unrelated host process must not be able to use the host-side
// bridge of an execution (danger-full-access + proxied, and the landlock
// tier) and be audited as that execution.
func TestSandboxEscapeBridgeLendsIdentity(t *testing.T) {
	for _, mode := range [][]string{{"--sandbox", "danger-full-access"}, {"--tier", "landlock"}} {
		t.Run(mode[1], func(t *testing.T) {
			cfg := StdConfig()
			cfg.Required = true
			p := StartProxy(t, cfg)
			up := StartUpstream(t, false)
			dir := sbxDir(t)
			// A subfolder: the landlock tier makes nothing new at the
			// workdir's top.
			if err := os.Mkdir(filepath.Join(dir, "work"), 0o755); err != nil {
				t.Fatal(err)
			}
			args := append(append([]string{"--control", p.Control, "--network", "proxied"}, mode...), "--", "sh", "-c",
				`echo "$HTTP_PROXY" > work/proxy.url; while [ ! -e work/go ]; do sleep 0.02; done; curl -sS -m 10 `+up.URL("up.test", "/hello"))
			ch := sbxRunAsync(t, p.Env(), dir, args...)
			var proxyURL string
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if b, _ := os.ReadFile(filepath.Join(dir, "work", "proxy.url")); len(bytes.TrimSpace(b)) > 0 {
					proxyURL = strings.TrimSpace(string(b))
					break
				}
			}
			if !strings.HasPrefix(proxyURL, "http://127.0.0.1:") {
				t.Fatalf("no host bridge URL: %q", proxyURL)
			}
			// An unrelated host process (curl started by the test).
			out, err := exec.Command("curl", "-sS", "-m", "5", "--proxy", proxyURL, up.URL("up.test", "/hello")).CombinedOutput()
			outsider := err == nil && strings.Contains(string(out), Hello)
			os.WriteFile(filepath.Join(dir, "work", "go"), nil, 0o644)
			got := sbxAwait(t, ch)
			if outsider {
				t.Fatalf("an unrelated host process used the execution's bridge: %s", out)
			}
			if got.code != 0 || !strings.Contains(got.r.Stdout, Hello) {
				t.Fatalf("the execution itself could not use its bridge: exit %d %+v", got.code, got.r)
			}
			if !slicesContains(got.r.Sandbox.Signals, "bridge_refused_peers:1") {
				t.Fatalf("the refusal is not reported: %v", got.r.Sandbox.Signals)
			}
			if up.Hits() != 1 {
				t.Fatalf("upstream hits %d, want 1 (the execution's own request)", up.Hits())
			}
			if lines := sbxAuditLines(t, p, "up.test"); len(lines) != 1 || lines[0]["execution_id"] != got.r.ExecutionID {
				t.Fatalf("audit lines for up.test: %v", lines)
			}
		})
	}
}

// Item 8: tmpfs mounts have a size, and (where cgroups can be created) the
// run has pids and memory limits.
func TestSandboxEscapeResourceLimits(t *testing.T) {
	for _, u := range escUsers(t) {
		t.Run(string(u), func(t *testing.T) {
			dir := escDir(t, u)
			writeScript(t, dir, "tmpfs.sh", `
for m in /tmp /run /dev/shm; do
  kb=$(df -Pk $m | awk 'NR==2 {print $2}')
  [ "$kb" -le 65536 ] || { echo "TMPFS:$m:$kb"; exit 4; }
done
dd if=/dev/zero of=/tmp/big bs=1M count=80 2>/dev/null && exit 5
exit 0`)
			r, code, stderr := escRun(t, u, false, dir, nil, "--network", "none", "--limit-tmpfs", "64M", "--", "sh", "./tmpfs.sh")
			if code != 0 {
				t.Fatalf("exit %d (4 tmpfs larger than --limit-tmpfs, 5 80 MiB fit): %s %s %s", code, r.Stdout, r.Stderr, stderr)
			}
			// Default tmpfs size: bounded, never half the RAM.
			writeScript(t, dir, "deftmpfs.sh", `kb=$(df -Pk /tmp | awk 'NR==2 {print $2}'); echo "$kb"; [ "$kb" -le 1048576 ]`)
			r, code, _ = escRun(t, u, false, dir, nil, "--network", "none", "--", "sh", "./deftmpfs.sh")
			if code != 0 {
				t.Fatalf("default /tmp is %s KiB, want at most 1 GiB", r.Stdout)
			}
			r, _, _ = escRun(t, u, false, dir, nil, "--network", "none", "--limit-pids", "32", "--timeout", "20s", "--", "perl", "-e",
				`my $n = 0; for (1..200) { my $p = fork; last unless defined $p; if ($p == 0) { sleep 5; exit } $n++ } print "FORKED:$n\n"; exit($n < 32 ? 0 : 1)`)
			cgroups := !slicesContainsPrefix(r.Sandbox.Signals, "cgroup_unavailable")
			if u == asRoot && !cgroups {
				t.Fatalf("root on this host must get a cgroup: signals %v", r.Sandbox.Signals)
			}
			if cgroups && r.ExitCode != 0 {
				t.Fatalf("--limit-pids 32 did not hold: %s %s signals %v", r.Stdout, r.Stderr, r.Sandbox.Signals)
			}
			if !cgroups && !slicesContainsPrefix(r.Sandbox.Signals, "cgroup_unavailable:") {
				t.Fatalf("no limit and no cgroup_unavailable signal: %v", r.Sandbox.Signals)
			}
			if cgroups {
				r, code, _ = escRun(t, u, false, dir, nil, "--network", "none", "--limit-memory", "64M", "--timeout", "20s", "--",
					"perl", "-e", `my $x = "a" x (300*1024*1024); print "ALLOCATED\n"`)
				if code == 0 || strings.Contains(r.Stdout, "ALLOCATED") {
					t.Fatalf("--limit-memory 64M let 300 MiB be allocated: exit %d %s", code, r.Stdout)
				}
			}
		})
	}
}

func slicesContainsPrefix(xs []string, prefix string) bool {
	for _, x := range xs {
		if strings.HasPrefix(x, prefix) {
			return true
		}
	}
	return false
}

// Item 9: a root caller fails closed without Landlock unless it passes
// --allow-degraded; and stdin from a host file cannot be re-opened writable
// through /proc/self/fd even then (the mount layer alone must stop it).
func TestSandboxEscapeLandlockMissing(t *testing.T) {
	outside, err := os.MkdirTemp("/var/tmp", "execwrap-e2e-hostfile-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	os.Chmod(outside, 0o755)
	for _, u := range escUsers(t) {
		t.Run(string(u), func(t *testing.T) {
			dir := escDir(t, u)
			hostFile := filepath.Join(outside, "host-"+string(u)+".txt")
			if err := os.WriteFile(hostFile, []byte("original\n"), 0o666); err != nil {
				t.Fatal(err)
			}
			os.Chmod(hostFile, 0o666)
			r, code, stderr := escRun(t, u, true, dir, nil, "--network", "none", "--", "touch", "ran")
			_, ran := os.Stat(filepath.Join(dir, "ran"))
			if u == asRoot {
				if code != 125 || ran == nil || !strings.Contains(stderr+r.Stderr, "--allow-degraded") {
					t.Fatalf("root without Landlock: exit %d ran=%v stderr %q", code, ran == nil, stderr)
				}
			} else if code != 0 || !slicesContains(r.Sandbox.Signals, "landlock_unavailable") {
				t.Fatalf("nobody without Landlock: exit %d signals %v stderr %s", code, r.Sandbox.Signals, stderr)
			}
			f, err := os.Open(hostFile)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r, code, stderr = escRun(t, u, true, dir, f, "--network", "none", "--allow-degraded", "--", "sh", "-c",
				`echo pwned >> /proc/self/fd/0; echo pwned > /proc/$$/fd/0; cat`)
			if code != 0 && !strings.Contains(r.Stderr, "ermission") && !strings.Contains(r.Stderr, "Read-only") && !strings.Contains(r.Stderr, "No such") {
				t.Fatalf("exit %d %s %s", code, r.Stderr, stderr)
			}
			if b, _ := os.ReadFile(hostFile); string(b) != "original\n" {
				t.Fatalf("the host file behind stdin was written through /proc/self/fd: %q", b)
			}
			if !strings.Contains(r.Stdout, "original") {
				t.Fatalf("stdin content did not reach the command: %q (stderr %s)", r.Stdout, r.Stderr)
			}
		})
	}
}

// Item 12: a missing .git cannot be created inside the sandbox (git init +
// core.fsmonitor would run code in the user's next host git status).
func TestSandboxEscapeMissingGitPlanted(t *testing.T) {
	for _, u := range escUsers(t) {
		t.Run(string(u), func(t *testing.T) {
			dir := escDir(t, u)
			pwned := filepath.Join(dir, "pwned")
			r, _, _ := escRun(t, u, false, dir, nil, "--network", "none", "--", "sh", "-c",
				`git init -q . 2>&1; git config core.fsmonitor "touch `+pwned+`" 2>&1; mkdir .git 2>&1; echo x > .git/config 2>&1; mkdir .hg/x 2>&1; exit 0`)
			if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
				entries, _ := os.ReadDir(filepath.Join(dir, ".git"))
				t.Fatalf("a .git was left in the workdir (%d entries): %s", len(entries), r.Stdout)
			}
			for _, n := range []string{".hg", ".svn", ".codex", ".execwrap", ".netproxy"} {
				if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
					t.Fatalf("%s was left in the workdir", n)
				}
			}
			git := exec.Command("git", "status")
			git.Dir = dir
			git.Run()
			if _, err := os.Stat(pwned); err == nil {
				t.Fatal("host git status ran the planted core.fsmonitor")
			}
		})
	}
}
