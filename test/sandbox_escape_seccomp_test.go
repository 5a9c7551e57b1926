package test

// End-to-end reproductions of issue 22's seccomp items with the real
// execwrap binary, both tiers, as root and as nobody (setpriv):
//   - item 1: TCP connections that do not pass through connect(2)
//     (MSG_FASTOPEN on sendto/sendmsg/sendmmsg, IPv4 and IPv6; listen()
//     with an autobound port in the landlock tier) and the paths checked
//     next to them (a destination on an unconnected socket without
//     MSG_FASTOPEN, TCP_FASTOPEN_CONNECT, TCP_REPAIR, io_uring, i386
//     system calls from a 64-bit process);
//   - item 6: setuid/setgid bits and file capabilities planted in the
//     workspace, however they are set.

import (
	"archive/tar"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tfoProbeC tries every way to a TCP connection that skips connect(2).
// argv: TARGET... ("NAME,4|6,ADDR,PORT"); one line per probe:
// "PROBE NAME: WORKED n" or "PROBE NAME: ERRNO-NAME".
const tfoProbeC = `
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char msg[] = "GET /healthz HTTP/1.0\r\n\r\n";

static void res(const char *probe, const char *name, long r) {
	if (r >= 0) printf("%s %s: WORKED %ld\n", probe, name, r);
	else printf("%s %s: %s\n", probe, name, strerrorname_np(errno));
	fflush(stdout);
}

static int sock(int fam) { return socket(fam == 6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0); }

int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		char name[64], addr[64]; int fam, port;
		if (sscanf(argv[i], "%63[^,],%d,%63[^,],%d", name, &fam, addr, &port) != 4) return 2;
		struct sockaddr_storage ss = {0}; socklen_t sl;
		if (fam == 6) { struct sockaddr_in6 *a = (void *)&ss; a->sin6_family = AF_INET6; a->sin6_port = htons(port); inet_pton(AF_INET6, addr, &a->sin6_addr); sl = sizeof *a; }
		else { struct sockaddr_in *a = (void *)&ss; a->sin_family = AF_INET; a->sin_port = htons(port); inet_pton(AF_INET, addr, &a->sin_addr); sl = sizeof *a; }
		struct iovec iov = {(void *)msg, sizeof msg - 1};
		struct msghdr mh = {.msg_name = &ss, .msg_namelen = sl, .msg_iov = &iov, .msg_iovlen = 1};
		struct mmsghdr mm = {.msg_hdr = mh};
		int fd, one = 1;
		fd = sock(fam); res("SENDTO-FASTOPEN", name, sendto(fd, msg, sizeof msg - 1, MSG_FASTOPEN | MSG_NOSIGNAL, (void *)&ss, sl)); close(fd);
		fd = sock(fam); res("SENDMSG-FASTOPEN", name, sendmsg(fd, &mh, MSG_FASTOPEN | MSG_NOSIGNAL)); close(fd);
		fd = sock(fam); res("SENDMMSG-FASTOPEN", name, sendmmsg(fd, &mm, 1, MSG_FASTOPEN | MSG_NOSIGNAL)); close(fd);
		fd = sock(fam); res("SENDTO-ADDR", name, sendto(fd, msg, sizeof msg - 1, MSG_NOSIGNAL, (void *)&ss, sl)); close(fd);
		fd = sock(fam); res("SENDMSG-ADDR", name, sendmsg(fd, &mh, MSG_NOSIGNAL)); close(fd);
		fd = sock(fam); res("CONNECT", name, connect(fd, (void *)&ss, sl)); close(fd);
		fd = sock(fam); setsockopt(fd, IPPROTO_TCP, TCP_FASTOPEN_CONNECT, &one, sizeof one);
		res("FASTOPEN-CONNECT", name, connect(fd, (void *)&ss, sl)); close(fd);
	}
	int one = 1, fd = sock(4);
	res("TCP-REPAIR", "-", setsockopt(fd, IPPROTO_TCP, TCP_REPAIR, &one, sizeof one)); close(fd);
	unsigned char params[120] = {0};
	res("IO-URING-SETUP", "-", syscall(SYS_io_uring_setup, 1, params));
	/* listen() without bind() autobinds an ephemeral port without passing
	   the bind hook: publish the port so the test dials it from the host. */
	fd = sock(4);
	long r = listen(fd, 1);
	res("LISTEN", "-", r);
	if (r == 0) {
		struct sockaddr_in a; socklen_t al = sizeof a;
		getsockname(fd, (void *)&a, &al);
		FILE *f = fopen("listen.port.tmp", "w"); fprintf(f, "%d\n", ntohs(a.sin_port)); fclose(f);
		rename("listen.port.tmp", "listen.port");
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 3000) == 1) res("ACCEPT-FROM-HOST", "-", accept(fd, 0, 0));
		else printf("ACCEPT-FROM-HOST -: none\n");
	}
	/* An i386 system call from this 64-bit process: socketcall(SYS_SOCKET).
	   int 0x80 zeroes r8-r15 on return. */
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		long ret;
		__asm__ volatile("int $0x80" : "=a"(ret) : "a"(102L), "b"(1L), "c"(0L)
			: "memory", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15");
		printf("INT80-SOCKETCALL -: returned %ld\n", ret);
		_exit(0);
	}
	int st; waitpid(pid, &st, 0);
	if (WIFSIGNALED(st)) printf("INT80-SOCKETCALL -: %s\n", sigabbrev_np(WTERMSIG(st)));
	return 0;
}
`

// needGCC returns gcc's path; the probes are C (raw syscalls, int 0x80).
func needGCC(t *testing.T) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatal("gcc is required to build the escape probes; run scripts/install-test-deps.sh")
	}
	return gcc
}

// buildC compiles src into dir/name on the host (mode 0755, so nobody can
// run it inside the sandbox).
func buildC(t *testing.T, dir, name, src string) {
	t.Helper()
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(needGCC(t), "-O1", "-Wall", "-o", filepath.Join(dir, name), c).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", name, err, out)
	}
	os.Chmod(filepath.Join(dir, name), 0o755)
}

// shareControlSocket lets nobody reach netproxy's (root-only) control
// socket, so an unprivileged run can use the proxied landlock tier.
func shareControlSocket(t *testing.T, p *Proxy) {
	t.Helper()
	if err := os.Chmod(p.Control, 0o666); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(p.Control); d != "/" && d != "."; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			os.Chmod(d, fi.Mode().Perm()|0o011)
		}
	}
}

// countingListener accepts on addr and counts the connections it got.
func countingListener(t *testing.T, network, addr string) (port int, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted = &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, accepted
}

// dialPublishedPort dials 127.0.0.1:PORT from the host once the probe
// writes PORT to dir/listen.port, until stop is closed.
func dialPublishedPort(dir string, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		b, err := os.ReadFile(filepath.Join(dir, "listen.port"))
		if err != nil {
			continue
		}
		port, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		if c, err := net.DialTimeout("tcp4", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			c.Close()
		}
		return
	}
}

// probeLines maps "PROBE NAME" to its result.
func probeLines(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok {
			m[k] = v
		}
	}
	return m
}

// Item 1: in the landlock tier connect() to anything but the bridge gets
// EACCES, but MSG_FASTOPEN on a fresh TCP socket connected anyway (the
// kernel connects inside sendmsg, past Landlock's connect hook). seccomp
// refuses the flag on sendto/sendmsg/sendmmsg in both tiers; listen()
// (whose autobind skips Landlock's bind hook) is refused in the landlock
// tier. The other probes record what the kernel already stops.
func TestSandboxEscapeTCPFastOpen(t *testing.T) {
	needGCC(t)
	p := StartProxy(t, StdConfig())
	shareControlSocket(t, p)
	port4, hits4 := countingListener(t, "tcp4", "127.0.0.1:0")
	port6, hits6 := countingListener(t, "tcp6", "[::1]:0")
	_, proxyPort, _ := net.SplitHostPort(p.HTTP)
	_, adminPort, _ := net.SplitHostPort(p.Admin)
	targets := []string{
		fmt.Sprintf("host4,4,127.0.0.1,%d", port4),
		fmt.Sprintf("host6,6,::1,%d", port6),
		"proxy,4,127.0.0.1," + proxyPort,
		"admin,4,127.0.0.1," + adminPort,
	}
	for _, tc := range escTierUsers(t) {
		tier, u := tc.tier, tc.u
		t.Run(tier+"/"+string(u), func(t *testing.T) {
			dir := escDir(t, u)
			buildC(t, dir, "tfo", tfoProbeC)
			before4, before6 := hits4.Load(), hits6.Load()
			stop := make(chan struct{})
			go dialPublishedPort(dir, stop)
			r, code, stderr := escRun(t, u, false, dir, nil, append([]string{"--tier", tier, "--network", "proxied", "--control", p.Control, "--", "./tfo"}, targets...)...)
			close(stop)
			if code != 0 {
				t.Fatalf("exit %d: %s %s %s", code, r.Stdout, r.Stderr, stderr)
			}
			got := probeLines(r.Stdout)
			want := func(key string, ok func(string) bool, what string) {
				t.Helper()
				if v, found := got[key]; !found || !ok(v) {
					t.Errorf("%s: got %q, want %s", key, v, what)
				}
			}
			is := func(s string) func(string) bool { return func(v string) bool { return v == s } }
			failed := func(v string) bool { return v != "" && !strings.HasPrefix(v, "WORKED") }
			for _, tg := range []string{"host4", "host6", "proxy", "admin"} {
				for _, pr := range []string{"SENDTO-FASTOPEN", "SENDMSG-FASTOPEN", "SENDMMSG-FASTOPEN"} {
					want(pr+" "+tg, is("EPERM"), "EPERM (seccomp refuses MSG_FASTOPEN)")
				}
				// Without MSG_FASTOPEN tcp_sendmsg ignores the address.
				want("SENDTO-ADDR "+tg, is("EPIPE"), "EPIPE")
				want("SENDMSG-ADDR "+tg, is("EPIPE"), "EPIPE")
				if tier == "landlock" {
					want("CONNECT "+tg, is("EACCES"), "EACCES (Landlock)")
					want("FASTOPEN-CONNECT "+tg, is("EACCES"), "EACCES (Landlock)")
				} else {
					want("CONNECT "+tg, failed, "a failure (empty netns)")
					want("FASTOPEN-CONNECT "+tg, failed, "a failure (empty netns)")
				}
			}
			want("TCP-REPAIR -", is("EPERM"), "EPERM (no CAP_NET_ADMIN)")
			want("IO-URING-SETUP -", is("EPERM"), "EPERM (seccomp)")
			if tier == "landlock" {
				want("LISTEN -", is("EPERM"), "EPERM (seccomp: listen autobinds past Landlock)")
			}
			if v := got["ACCEPT-FROM-HOST -"]; strings.HasPrefix(v, "WORKED") {
				t.Errorf("a host process connected to a listener inside the sandbox")
			}
			// SIGSYS: the filter kills foreign-arch calls; SIGSEGV: the
			// kernel has no i386 entry (ia32_emulation off).
			want("INT80-SOCKETCALL -", func(v string) bool { return v == "SYS" || v == "SEGV" }, "SYS (or SEGV without ia32 emulation)")
			if n4, n6 := hits4.Load()-before4, hits6.Load()-before6; n4+n6 != 0 {
				t.Errorf("host listeners were reached from the sandbox: IPv4 %d, IPv6 %d", n4, n6)
			}
			if t.Failed() {
				t.Logf("probe output:\n%s", r.Stdout)
			}
		})
	}
}

// plantProbeC sets setuid/setgid bits and file capabilities through every
// system call that can, each on a file of its own; one line per probe.
const plantProbeC = `
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static void res(const char *probe, long r) {
	if (r >= 0) printf("%s: WORKED\n", probe);
	else printf("%s: %s\n", probe, strerrorname_np(errno));
	fflush(stdout);
}

static int fresh(const char *p) { unlink(p); int fd = open(p, O_CREAT | O_WRONLY, 0755); close(fd); return fd; }

int main(void) {
	/* struct vfs_cap_data, revision 2, effective, permitted = CAP_SETUID. */
	uint32_t cap[5] = {0x02000001, 1u << 7, 0, 0, 0};
	struct { uint64_t flags, mode, resolve; } how = {O_CREAT | O_WRONLY, 04755, 0};
	struct { uint64_t value; uint32_t size, flags; } xattrArgs = {(uintptr_t)cap, sizeof cap, 0};
	int fd;
	res("SANITY-CREATE-0755", fresh("p-plain"));
	res("SANITY-CHMOD-0700", syscall(SYS_fchmodat, AT_FDCWD, "p-plain", 0700));
	res("SANITY-CHMOD-1777", syscall(SYS_fchmodat, AT_FDCWD, "p-plain", 01777));
#ifdef SYS_chmod
	fresh("p-chmod"); res("CHMOD-4755", syscall(SYS_chmod, "p-chmod", 04755));
	res("CHMOD-2755", syscall(SYS_chmod, "p-chmod", 02755));
	res("SANITY-CHMOD-0755", syscall(SYS_chmod, "p-chmod", 0755));
#endif
	fresh("p-fchmod"); fd = open("p-fchmod", O_RDONLY); res("FCHMOD-6755", syscall(SYS_fchmod, fd, 06755)); close(fd);
	fresh("p-fchmodat"); res("FCHMODAT-4755", syscall(SYS_fchmodat, AT_FDCWD, "p-fchmodat", 04755));
	fresh("p-fchmodat2"); res("FCHMODAT2-4755", syscall(452, AT_FDCWD, "p-fchmodat2", 04755, 0));
	/* The mode's high bits are ignored by the kernel (umode_t). */
	fresh("p-fchmodat-hi"); res("FCHMODAT-HIGHBITS-4755", syscall(SYS_fchmodat, AT_FDCWD, "p-fchmodat-hi", 0x100000000L | 04755));
#ifdef SYS_open
	unlink("p-open"); res("OPEN-CREAT-4755", syscall(SYS_open, "p-open", O_CREAT | O_WRONLY, 04755));
#endif
	unlink("p-openat"); res("OPENAT-CREAT-6755", syscall(SYS_openat, AT_FDCWD, "p-openat", O_CREAT | O_WRONLY, 06755));
	res("SANITY-OPENAT-NOCREAT", syscall(SYS_openat, AT_FDCWD, "p-plain", O_RDONLY, 04755));
#ifdef SYS_creat
	unlink("p-creat"); res("CREAT-4755", syscall(SYS_creat, "p-creat", 04755));
#endif
	fd = syscall(SYS_openat, AT_FDCWD, ".", O_TMPFILE | O_WRONLY, 04755);
	res("OPENAT-TMPFILE-4755", fd);
	if (fd >= 0) { char pp[64]; snprintf(pp, sizeof pp, "/proc/self/fd/%d", fd); linkat(AT_FDCWD, pp, AT_FDCWD, "p-tmpfile", AT_SYMLINK_FOLLOW); }
	unlink("p-openat2"); res("OPENAT2-4755", syscall(437, AT_FDCWD, "p-openat2", &how, sizeof how));
#ifdef SYS_mknod
	unlink("p-mknod"); res("MKNOD-4755", syscall(SYS_mknod, "p-mknod", S_IFREG | 04755, 0));
#endif
	unlink("p-mknodat"); res("MKNODAT-2755", syscall(SYS_mknodat, AT_FDCWD, "p-mknodat", S_IFREG | 02755, 0));
	/* mkdir cannot set S_ISUID/S_ISGID (the kernel masks them): the host
	   check proves it. */
	rmdir("p-mkdir"); res("SANITY-MKDIR-6755", syscall(SYS_mkdirat, AT_FDCWD, "p-mkdir", 06755));
	fresh("p-setxattr"); res("SETXATTR-CAP", syscall(SYS_setxattr, "p-setxattr", "security.capability", cap, sizeof cap, 0));
	fresh("p-lsetxattr"); res("LSETXATTR-CAP", syscall(SYS_lsetxattr, "p-lsetxattr", "security.capability", cap, sizeof cap, 0));
	fresh("p-fsetxattr"); fd = open("p-fsetxattr", O_RDONLY); res("FSETXATTR-CAP", syscall(SYS_fsetxattr, fd, "security.capability", cap, sizeof cap, 0)); close(fd);
	fresh("p-setxattrat"); res("SETXATTRAT-CAP", syscall(463, AT_FDCWD, "p-setxattrat", 0, "security.capability", &xattrArgs, sizeof xattrArgs));
	res("SETXATTR-USER", syscall(SYS_setxattr, "p-plain", "user.note", "x", 1, 0));
	/* Setuid files the host put there before the run: chown to root needs
	   CAP_CHOWN, and a write clears the bits (no CAP_FSETID). */
	res("CHOWN-PRE-SUID-TO-ROOT", syscall(SYS_fchownat, AT_FDCWD, "pre-suid-nobody", 0, 0, 0));
	fd = open("pre-suid-root", O_WRONLY | O_APPEND);
	res("WRITE-PRE-SUID", fd < 0 ? -1 : write(fd, "x", 1)); close(fd);
	return 0;
}
`

// plantScript runs the tools a build (or an attacker) uses to set modes;
// one "NAME:ok|failed" line each. $1 is a tar with a setuid member.
const plantScript = `
try() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "$n:ok"; else echo "$n:failed"; fi; }
gcc -o suid suid.c || { echo "GCC:failed"; exit 20; }
try SANITY-CHMOD-755 chmod 755 suid
try SANITY-CHMOD-X chmod +x,go-w suid
cp suid s-6755; try CHMOD-6755 chmod 6755 s-6755
cp suid s-us; try CHMOD-U+S chmod u+s s-us
cp suid s-gs; try CHMOD-G+S chmod g+s s-gs
try INSTALL-4755 install -m 4755 suid s-install
try SANITY-INSTALL-755 install -m 755 suid s-install755
try SANITY-MKDIR-755 mkdir -p -m 755 s-dir/sub
try PERL-SYSOPEN-4755 perl -e 'use Fcntl; sysopen(my $f, "s-perl", O_CREAT|O_WRONLY, 04755) or exit 1'
try PYTHON-OPEN-4755 /usr/bin/python3 -c 'import os; os.open("s-python", os.O_CREAT | os.O_WRONLY, 0o4755)'
try PYTHON-CHMOD-4755 /usr/bin/python3 -c 'import os, shutil; shutil.copy("suid", "s-pychmod"); os.chmod("s-pychmod", 0o4755)'
cp suid s-setcap; try SETCAP setcap cap_setuid+ep s-setcap
cp suid s-pyxattr; try PYTHON-SETXATTR-CAP /usr/bin/python3 -c 'import os; os.setxattr("s-pyxattr", "security.capability", bytes.fromhex("0100000280000000000000000000000000000000"))'
try CP-P-SU cp -p /usr/bin/su s-su
try TAR-SUID tar -xpf plant.tar
try SANITY-CP-P cp -p suid s-cp-p
./p-probe
exit 0
`

// Item 6: a plant of a setuid/setgid binary or of file capabilities in
// the workspace must leave nothing on the host: the sandboxed calls fail
// (EPERM for modes, ENOSYS for openat2, EOPNOTSUPP for setxattr) and
// ordinary chmod/install/cp -p keep working.
func TestSandboxEscapeSetuidPlant(t *testing.T) {
	needGCC(t)
	for _, tool := range []string{"setcap", "/usr/bin/python3", "install", "tar", "perl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required (each plant attempt must be able to succeed); run scripts/install-test-deps.sh", tool)
		}
	}
	for _, tc := range escTierUsers(t) {
		tier, u := tc.tier, tc.u
		t.Run(tier+"/"+string(u), func(t *testing.T) {
			// The plant happens in a subfolder of the workspace: the
			// landlock tier makes nothing new at a writable root's top.
			ws := escDir(t, u)
			dir := filepath.Join(ws, "plant")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if u == asNobody {
				os.Chown(dir, 65534, 65534)
			}
			buildC(t, dir, "p-probe", plantProbeC)
			os.WriteFile(filepath.Join(dir, "suid.c"), []byte("#include <stdio.h>\n#include <unistd.h>\nint main(void){printf(\"euid=%d\\n\", (int)geteuid());return 0;}\n"), 0o644)
			writeSetuidTar(t, filepath.Join(dir, "plant.tar"))
			writeScript(t, dir, "plant.sh", plantScript)
			// Setuid files the host made before the run (a user's own).
			preNobody, preRoot := filepath.Join(dir, "pre-suid-nobody"), filepath.Join(dir, "pre-suid-root")
			for _, f := range []string{preNobody, preRoot} {
				if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			os.Chown(preNobody, 65534, 65534)
			os.Chmod(preNobody, 0o4755)
			os.Chmod(preRoot, 0o4777) // writable by nobody too
			if u == asNobody {
				for _, n := range []string{"suid.c", "plant.tar", "plant.sh"} {
					os.Chown(filepath.Join(dir, n), 65534, 65534)
				}
			}
			r, code, stderr := escRun(t, u, false, ws, nil, "--tier", tier, "--network", "none", "--", "sh", "-c", "cd plant && sh ./plant.sh")
			if code != 0 {
				t.Fatalf("exit %d: %s %s %s", code, r.Stdout, r.Stderr, stderr)
			}
			got := map[string]string{}
			for _, l := range strings.Split(r.Stdout, "\n") {
				if k, v, ok := strings.Cut(l, ":"); ok {
					got[k] = strings.TrimSpace(v)
				}
			}
			expect := map[string]string{
				"CHMOD-6755": "failed", "CHMOD-U+S": "failed", "CHMOD-G+S": "failed", "INSTALL-4755": "failed",
				"PERL-SYSOPEN-4755": "failed", "PYTHON-OPEN-4755": "failed", "PYTHON-CHMOD-4755": "failed",
				"SETCAP": "failed", "PYTHON-SETXATTR-CAP": "failed",
				"SANITY-CHMOD-755": "ok", "SANITY-CHMOD-X": "ok", "SANITY-INSTALL-755": "ok", "SANITY-MKDIR-755": "ok", "SANITY-CP-P": "ok",
				"CHMOD-2755": "EPERM", "FCHMOD-6755": "EPERM", "FCHMODAT-4755": "EPERM", "FCHMODAT2-4755": "EPERM",
				"FCHMODAT-HIGHBITS-4755": "EPERM", "CHMOD-4755": "EPERM", "OPEN-CREAT-4755": "EPERM", "OPENAT-CREAT-6755": "EPERM",
				"CREAT-4755": "EPERM", "OPENAT-TMPFILE-4755": "EPERM", "MKNOD-4755": "EPERM", "MKNODAT-2755": "EPERM",
				"OPENAT2-4755": "ENOSYS",
				"SETXATTR-CAP": "EOPNOTSUPP", "LSETXATTR-CAP": "EOPNOTSUPP", "FSETXATTR-CAP": "EOPNOTSUPP", "SETXATTRAT-CAP": "EOPNOTSUPP",
				"SETXATTR-USER":      "EOPNOTSUPP",
				"SANITY-CREATE-0755": "WORKED", "SANITY-CHMOD-0700": "WORKED", "SANITY-CHMOD-1777": "WORKED", "SANITY-CHMOD-0755": "WORKED",
				"SANITY-OPENAT-NOCREAT": "WORKED", "SANITY-MKDIR-6755": "WORKED",
				"CHOWN-PRE-SUID-TO-ROOT": "EPERM|EINVAL", // EINVAL: uid 0 unmapped in nobody's namespace "WRITE-PRE-SUID": "WORKED",
			}
			for k, w := range expect {
				if !slices.Contains(strings.Split(w, "|"), got[k]) {
					t.Errorf("%s: got %q, want %q", k, got[k], w)
				}
			}
			if fi, err := os.Stat(preNobody); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 65534 {
				t.Errorf("host: the host's setuid file changed owner inside the sandbox (%v)", err)
			}
			if fi, err := os.Stat(preRoot); err != nil {
				t.Error(err)
			} else if fi.Mode()&os.ModeSetuid != 0 || fi.Size() != int64(len("#!/bin/sh\n"))+1 {
				t.Errorf("host: after a write inside the sandbox a host file is %v, %d bytes", fi.Mode(), fi.Size())
			}
			os.Remove(preNobody) // the host's own; checkNoPlant looks for the sandbox's
			checkNoPlant(t, dir)
			// The demonstration: the compiled program run by nobody
			// on the host keeps nobody's euid.
			out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", filepath.Join(dir, "s-6755")).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "euid=65534" {
				t.Errorf("the planted binary run by nobody on the host: %q (%v)", out, err)
			}
			if t.Failed() {
				t.Logf("sandbox output:\n%s\n%s", r.Stdout, r.Stderr)
			}
		})
	}
}

// writeSetuidTar writes a tar holding one regular file of mode 04755.
func writeSetuidTar(t *testing.T, path string) {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	body := []byte("#!/bin/sh\nid -u\n")
	tw.WriteHeader(&tar.Header{Name: "s-tar", Mode: 0o4755, Size: int64(len(body)), Typeflag: tar.TypeReg, ModTime: time.Now()})
	tw.Write(body)
	tw.Close()
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkNoPlant fails for any file under dir with S_ISUID/S_ISGID or a
// security.capability xattr, as seen from the host.
func checkNoPlant(t *testing.T, dir string) {
	t.Helper()
	n := 0
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		n++
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("host: %s has mode %v", p, fi.Mode())
		}
		buf := make([]byte, 64)
		if _, err := unix.Lgetxattr(p, "security.capability", buf); err != unix.ENODATA && err != unix.ENOTSUP {
			t.Errorf("host: %s has a security.capability xattr (getxattr: %v)", p, err)
		}
		return nil
	})
	if n < 20 {
		t.Fatalf("host: only %d entries under %s; the plant script did not run", n, dir)
	}
}
