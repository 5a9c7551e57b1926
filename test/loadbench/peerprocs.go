package main

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/netproxy/netproxy/test/benchproc"
)

// The peers of the side-by-side bench run as their own processes, each
// started here with a bench configuration rendered into its own temporary
// directory (removed at stop), and stopped with its whole process tree.

//go:embed peers/squid.conf.tmpl peers/sockd.conf.tmpl peers/squid-bump.conf.tmpl
var peerTemplates embed.FS

// peerProc is one running peer (or helper) process and what the bench
// needs of it.
type peerProc struct {
	name      string
	cmd       *exec.Cmd
	dir       string        // its temporary directory ("" for none)
	httpAddr  string        // HTTP proxy listener, or the address of a relay/origin
	socksAddr string        // SOCKS5 listener ("" for none)
	adminAddr string        // netproxy's admin listener (metrics)
	logs      []string      // files whose tail explains a failure
	exited    chan struct{} // closed when the process has been reaped
}

func (p *peerProc) pid() int { return p.cmd.Process.Pid }

// reap waits for the process in the background and closes p.exited.
func (p *peerProc) reap() {
	p.exited = make(chan struct{})
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
}

// stop ends the peer's whole process tree and removes its directory.
func (p *peerProc) stop() {
	killTree(p.pid(), 10*time.Second, func() { <-p.exited })
	if p.dir != "" {
		os.RemoveAll(p.dir)
	}
}

// logTail is the end of the peer's log files, for error messages.
func (p *peerProc) logTail() string {
	var b strings.Builder
	for _, f := range p.logs {
		data, err := os.ReadFile(f)
		if err != nil || len(data) == 0 {
			continue
		}
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		fmt.Fprintf(&b, "\n--- %s ---\n%s", filepath.Base(f), data)
	}
	return b.String()
}

// fromHelper wraps a role process of this binary.
func fromHelper(name string, h *helper) *peerProc {
	p := &peerProc{name: name, cmd: h.cmd, httpAddr: h.addr}
	p.reap()
	return p
}

func freePort() (int, error) {
	a, err := freeAddr()
	if err != nil {
		return 0, err
	}
	_, p, _ := net.SplitHostPort(a)
	return strconv.Atoi(p)
}

// startProc starts cmd with its output in dir/out.log, dying with this
// process, and waits until addr accepts connections.
func startProc(p *peerProc, addr string) error {
	out, err := os.Create(filepath.Join(p.dir, p.name+".out"))
	if err != nil {
		return err
	}
	defer out.Close()
	p.logs = append([]string{out.Name()}, p.logs...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.Dir = p.dir
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	p.reap()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited at start: %v%s", p.name, p.cmd.ProcessState, p.logTail())
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	killTree(p.pid(), time.Second, func() { <-p.exited })
	return fmt.Errorf("%s did not listen on %s within 20 s%s", p.name, addr, p.logTail())
}

// renderPeerConfig renders the embedded template name into dir.
func renderPeerConfig(name, dir string, data any) (string, error) {
	t, err := template.ParseFS(peerTemplates, "peers/"+name+".tmpl")
	if t != nil {
		t.Option("missingkey=error") // a key the bench forgot fails, not "<no value>"
	}
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("peers/%s.tmpl: %w", name, err)
	}
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, b.Bytes(), 0o644)
}

// startSquid starts Squid in the foreground (-N, one worker) with
// test/loadbench/peers/squid.conf.tmpl. Run as root, Squid drops to the
// Debian `proxy` user, which then owns the directory.
func startSquid(bin string, fds int) (*peerProc, error) {
	dir, err := newSquidDir("bench-squid", benchHosts)
	if err != nil {
		return nil, err
	}
	p := &peerProc{name: "squid", dir: dir, logs: []string{filepath.Join(dir, "cache.log")}}
	fail := func(err error) (*peerProc, error) { os.RemoveAll(dir); return nil, err }
	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	if err := runSquid(p, bin, "squid.conf", port, map[string]any{"Dir": dir, "Port": port, "FDs": fds}); err != nil {
		return fail(err)
	}
	return p, nil
}

// runSquid renders the template conf into p.dir, gives the directory to
// Squid's user and starts Squid in the foreground on port.
func runSquid(p *peerProc, bin, conf string, port int, data map[string]any) error {
	path, err := renderPeerConfig(conf, p.dir, data)
	if err != nil {
		return err
	}
	if err := chownProxy(p.dir); err != nil {
		return err
	}
	p.httpAddr = fmt.Sprintf("127.0.0.1:%d", port)
	p.cmd = exec.Command(bin, "-N", "-f", path)
	return startProc(p, p.httpAddr)
}

// newSquidDir makes a Squid instance's temporary directory with its
// hosts_file (hosts: name → address).
func newSquidDir(prefix string, hosts map[string]string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for name, ip := range hosts {
		fmt.Fprintf(&b, "%s %s\n", ip, name)
	}
	if err := os.Chmod(dir, 0o755); err == nil {
		err = os.WriteFile(filepath.Join(dir, "hosts"), []byte(b.String()), 0o644)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// startDante starts Dante's danted in the foreground with
// test/loadbench/peers/sockd.conf.tmpl (SOCKS5, no authentication,
// loopback only).
func startDante(bin string) (*peerProc, error) {
	dir, err := os.MkdirTemp("", "bench-dante")
	if err != nil {
		return nil, err
	}
	p := &peerProc{name: "danted", dir: dir, logs: []string{filepath.Join(dir, "sockd.log")}}
	fail := func(err error) (*peerProc, error) { os.RemoveAll(dir); return nil, err }
	if err := os.Chmod(dir, 0o755); err != nil {
		return fail(err)
	}
	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	// Debian's danted runs as root with an unprivileged user for the
	// children; as any other user it keeps that user throughout.
	priv, unpriv := "root", "nobody"
	if os.Geteuid() != 0 {
		u, err := user.Current()
		if err != nil {
			return fail(err)
		}
		priv, unpriv = u.Username, u.Username
	}
	conf, err := renderPeerConfig("sockd.conf", dir, map[string]any{"Dir": dir, "Port": port, "Privileged": priv, "Unprivileged": unpriv})
	if err != nil {
		return fail(err)
	}
	p.socksAddr = fmt.Sprintf("127.0.0.1:%d", port)
	p.cmd = exec.Command(bin, "-f", conf, "-p", filepath.Join(dir, "danted.pid"), "-N", "1")
	if err := startProc(p, p.socksAddr); err != nil {
		return fail(err)
	}
	return p, nil
}

// netproxyPeerConfig is netproxy's configuration in the peer bench: the
// production shape — audit on, metrics on (always served on the admin
// listener), the local/private guard on (allow_local_binding = false),
// approvals off, log level warn. The loopback origin is reached by the name
// up.test, whose static answer 127.0.0.1 is exempted from the guard by the
// allow-list address entry 127.0.0.1/32 (SPEC 3.2, 3.4).
const netproxyPeerConfig = `[listen]
http = %q
socks5 = %q
admin = %q
[control]
socket = %q
[network]
allow_local_binding = false
[network.domains]
"up.test" = "allow"
"127.0.0.1/32" = "allow"
%s[dns.hosts]
"up.test" = ["127.0.0.1"]
%s[approvals]
enabled = false
[audit]
path = %q
[limits]
max_connections = 20000
[log]
level = "warn"
%s`

// netproxyExtra is what a part of the bench adds to netproxy's peer
// configuration: allow-list lines, [dns.hosts] lines, sections at the end,
// and files next to the configuration.
type netproxyExtra struct {
	domains, hosts, tail string
	files                map[string][]byte
}

// startNetproxyPeer writes the bench configuration, checks with
// `netproxy check` that the bench's requests are allowed with the guard
// on (and that the guard still blocks another loopback address), and
// starts `netproxy serve`.
func startNetproxyPeer(bin string, originPort int) (*peerProc, error) {
	return startNetproxyPeerWith(bin, originPort, netproxyExtra{})
}

// startNetproxyPeerWith is startNetproxyPeer with ex added to the
// configuration.
func startNetproxyPeerWith(bin string, originPort int, ex netproxyExtra) (*peerProc, error) {
	dir, err := os.MkdirTemp("", "bench-netproxy")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*peerProc, error) { os.RemoveAll(dir); return nil, err }
	var addrs [3]string
	for i := range addrs {
		if addrs[i], err = freeAddr(); err != nil {
			return fail(err)
		}
	}
	cfg := fmt.Sprintf(netproxyPeerConfig, addrs[0], addrs[1], addrs[2], filepath.Join(dir, "control.sock"), ex.domains, ex.hosts, filepath.Join(dir, "audit.jsonl"), ex.tail)
	if err := writeFiles(dir, ex.files); err != nil {
		return fail(err)
	}
	path := filepath.Join(dir, "netproxy.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return fail(err)
	}
	env := append(os.Environ(), "NETPROXY_HOME="+dir, "HOME="+dir)
	target := fmt.Sprintf("up.test:%d", originPort)
	for _, c := range []struct {
		protocol, target, want string
	}{
		{"http", target, "allow"},
		{"https", target, "allow"},
		{"socks5", target, "allow"},
		{"http", fmt.Sprintf("127.0.0.2:%d", originPort), "not_allowed_local"},
	} {
		if err := netproxyCheck(bin, path, env, c.protocol, c.target, c.want); err != nil {
			return fail(err)
		}
	}
	p := &peerProc{name: "netproxy", dir: dir, httpAddr: addrs[0], socksAddr: addrs[1], adminAddr: addrs[2]}
	p.cmd = exec.Command(bin, "serve", "--config", path)
	p.cmd.Env = env
	if err := startProc(p, addrs[2]); err != nil {
		return fail(err)
	}
	if err := benchproc.WaitHealthy(addrs[2], 15*time.Second); err != nil {
		p.stop()
		return nil, fmt.Errorf("%w%s", err, p.logTail())
	}
	return p, nil
}

// netproxyCheck runs `netproxy check --json` and wants an allow with the
// local guard step passed (not skipped by allow_local_binding), or a
// block with the reason want.
func netproxyCheck(bin, cfg string, env []string, protocol, target, want string) error {
	cmd := exec.Command(bin, "check", "--config", cfg, "--json", "--protocol", protocol, target)
	cmd.Env = env
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return fmt.Errorf("netproxy check: %w", err)
	}
	var d struct {
		Decision, Reason string
		Steps            []struct{ Step, Result, Detail string }
	}
	if err := json.Unmarshal(out, &d); err != nil {
		return fmt.Errorf("netproxy check %s %s: %v\n%s", protocol, target, err, out)
	}
	if want != "allow" {
		if d.Decision != "deny" || d.Reason != want {
			return fmt.Errorf("netproxy check %s %s: %s/%s, want deny/%s: the local guard is not on\n%s", protocol, target, d.Decision, d.Reason, want, out)
		}
		return nil
	}
	if d.Decision != "allow" {
		return fmt.Errorf("netproxy check %s %s: %s (%s), want allow\n%s", protocol, target, d.Decision, d.Reason, out)
	}
	for _, s := range d.Steps {
		if s.Step == "local_guard" {
			if s.Result != "pass" || strings.Contains(s.Detail, "allow_local_binding") {
				return fmt.Errorf("netproxy check %s %s: local guard step %s %q, want a pass with the guard on", protocol, target, s.Result, s.Detail)
			}
			return nil
		}
	}
	return fmt.Errorf("netproxy check %s %s: no local_guard step\n%s", protocol, target, out)
}

// checkNetproxyObserving wants netproxy's audit log to hold a decision and
// its metrics to count requests once the preflight has gone through it:
// the bench measures netproxy with audit and metrics on.
func checkNetproxyObserving(p *peerProc) error {
	audit := filepath.Join(p.dir, "audit.jsonl")
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, _ := os.ReadFile(audit)
		if bytes.Contains(data, []byte(`"network_decision"`)) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netproxy wrote no network_decision to its audit log %s", audit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Get("http://" + p.adminAddr + "/metrics")
	if err != nil {
		return fmt.Errorf("netproxy metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("netproxy metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("netproxy_requests_total{")) {
		return fmt.Errorf("netproxy metrics: status %d, no netproxy_requests_total series", resp.StatusCode)
	}
	return nil
}
