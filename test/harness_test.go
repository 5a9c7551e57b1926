// Package test holds netproxy's end-to-end tests: they build the real
// binaries, start them with real configs, and drive them with real clients
// (curl, Go's net/http, raw sockets) against upstreams on 127.0.0.1 named
// through [dns.hosts]. Shared helpers live in this file so every team can
// add its own *_test.go files to this package.
package test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Binaries built once by TestMain.
var (
	binDir          string
	netproxyBin     string
	execwrapBin     string
	execwrapBuildEr error
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "netproxy-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	root := repoRoot()
	netproxyBin = filepath.Join(dir, "netproxy")
	if out, err := goBuild(root, netproxyBin, "./cmd/netproxy"); err != nil {
		fmt.Fprintf(os.Stderr, "building netproxy: %v\n%s", err, out)
		return 1
	}
	execwrapBin = filepath.Join(dir, "execwrap")
	if out, err := goBuild(root, execwrapBin, "./cmd/execwrap"); err != nil {
		// Only the tests that run execwrap fail (ExecwrapBin reports it).
		execwrapBuildEr = fmt.Errorf("building execwrap: %v\n%s", err, out)
	}
	return m.Run()
}

func goBuild(root, out, pkg string) ([]byte, error) {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	return cmd.CombinedOutput()
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// ExecwrapBin returns the execwrap binary, failing the test if it did not build.
func ExecwrapBin(t testing.TB) string {
	t.Helper()
	if execwrapBuildEr != nil {
		t.Fatal(execwrapBuildEr)
	}
	return execwrapBin
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ProxyConfig is the policy part of a test configuration.
type ProxyConfig struct {
	Mode       string      // "full" (default) | "limited"
	AllowLocal bool        // network.allow_local_binding
	Domains    [][2]string // pattern, "allow"|"deny"
	Hosts      map[string][]string
	Required   bool // attribution.required
	Approvals  bool // approvals.enabled (user reviewer, on-request)
	Extra      string
}

// StdConfig is the usual fixture: up.test and closed.test allowed,
// denied.test and *.evil.invalid denied, other.test unlisted; every name
// resolves to 127.0.0.1 and the local guard is off.
func StdConfig() ProxyConfig {
	return ProxyConfig{
		AllowLocal: true,
		Domains: [][2]string{
			{"up.test", "allow"}, {"closed.test", "allow"},
			{"denied.test", "deny"}, {"*.evil.invalid", "deny"},
		},
		Hosts: map[string][]string{
			"up.test": {"127.0.0.1"}, "closed.test": {"127.0.0.1"},
			"denied.test": {"127.0.0.1"}, "other.test": {"127.0.0.1"},
		},
	}
}

func (c ProxyConfig) toml() string {
	var b strings.Builder
	mode := c.Mode
	if mode == "" {
		mode = "full"
	}
	fmt.Fprintf(&b, "[network]\nmode = %q\nallow_local_binding = %t\n\n", mode, c.AllowLocal)
	if len(c.Domains) > 0 {
		b.WriteString("[network.domains]\n")
		for _, d := range c.Domains {
			fmt.Fprintf(&b, "%q = %q\n", d[0], d[1])
		}
		b.WriteString("\n")
	}
	b.WriteString("[dns]\ntimeout = \"2s\"\n")
	if len(c.Hosts) > 0 {
		b.WriteString("[dns.hosts]\n")
		names := make([]string, 0, len(c.Hosts))
		for n := range c.Hosts {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			q := make([]string, len(c.Hosts[n]))
			for i, ip := range c.Hosts[n] {
				q[i] = strconv.Quote(ip)
			}
			fmt.Fprintf(&b, "%q = [%s]\n", n, strings.Join(q, ", "))
		}
	}
	fmt.Fprintf(&b, "\n[attribution]\nrequired = %t\n\n", c.Required)
	if c.Approvals {
		b.WriteString("[approvals]\nenabled = true\nreviewer = \"user\"\npolicy = \"on-request\"\ntimeout = \"30s\"\n\n")
	} else {
		b.WriteString("[approvals]\nenabled = false\n\n")
	}
	b.WriteString(c.Extra)
	b.WriteString("\n")
	return b.String()
}

// Proxy is a running `netproxy serve`.
type Proxy struct {
	HTTP, SOCKS, Admin string // 127.0.0.1:port
	Control            string // control socket
	Home               string // NETPROXY_HOME
	Audit              string
	Token              string // admin bearer token
	ConfigPath         string
	Dir                string
	Output             *SyncBuffer // stdout+stderr
	Cmd                *exec.Cmd
	exited             chan struct{}
}

// SyncBuffer is a goroutine-safe bytes.Buffer for process output.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const adminTokenEnv = "E2E_ADMIN_TOKEN"

// WriteProxyConfig writes a complete config (free ports, control socket,
// audit file in dir) and returns the proxy description without starting it.
func WriteProxyConfig(t testing.TB, c ProxyConfig) *Proxy {
	t.Helper()
	dir := t.TempDir()
	tok := make([]byte, 16)
	rand.Read(tok)
	p := &Proxy{
		HTTP:    fmt.Sprintf("127.0.0.1:%d", FreePort(t)),
		SOCKS:   fmt.Sprintf("127.0.0.1:%d", FreePort(t)),
		Admin:   fmt.Sprintf("127.0.0.1:%d", FreePort(t)),
		Control: filepath.Join(dir, "control.sock"),
		Home:    filepath.Join(dir, "home"),
		Audit:   filepath.Join(dir, "audit.jsonl"),
		Token:   hex.EncodeToString(tok),
		Dir:     dir,
		Output:  &SyncBuffer{},
	}
	os.MkdirAll(p.Home, 0o700)
	var b strings.Builder
	fmt.Fprintf(&b, "[listen]\nhttp = %q\nsocks5 = %q\nadmin = %q\n\n", p.HTTP, p.SOCKS, p.Admin)
	fmt.Fprintf(&b, "[control]\nsocket = %q\n\n[admin]\ntoken_env = %q\n\n[audit]\npath = %q\n\n", p.Control, adminTokenEnv, p.Audit)
	b.WriteString(c.toml())
	p.ConfigPath = filepath.Join(dir, "netproxy.toml")
	if err := os.WriteFile(p.ConfigPath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Env is the environment of product processes: no proxy variables, HOME
// and NETPROXY_HOME in the test's folder, the admin token variable set.
func (p *Proxy) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k := strings.ToUpper(strings.SplitN(kv, "=", 2)[0])
		if strings.HasSuffix(k, "_PROXY") || k == "HOME" || k == "NETPROXY_HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+p.Dir, "NETPROXY_HOME="+p.Home, adminTokenEnv+"="+p.Token)
}

// StartProxy writes a config for c, starts `netproxy serve --config F`
// and waits for /healthz. The process is killed when the test ends.
func StartProxy(t testing.TB, c ProxyConfig) *Proxy {
	t.Helper()
	p := WriteProxyConfig(t, c)
	p.Start(t)
	return p
}

// Start runs the configured proxy and waits until it is healthy.
func (p *Proxy) Start(t testing.TB) {
	t.Helper()
	cmd := exec.Command(netproxyBin, "serve", "--config", p.ConfigPath)
	cmd.Env = p.Env()
	cmd.Stdout = p.Output
	cmd.Stderr = p.Output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.Cmd = cmd
	p.exited = make(chan struct{})
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		if !p.Exited() {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if p.Exited() {
			t.Fatalf("netproxy serve exited early: %v\n%s", cmd.ProcessState, p.Output.String())
		}
		if resp, err := http.Get("http://" + p.Admin + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("netproxy serve not healthy within 15s\n%s", p.Output.String())
}

// Exited reports whether the process has ended.
func (p *Proxy) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Signal sends sig to the proxy process.
func (p *Proxy) Signal(sig syscall.Signal) { p.Cmd.Process.Signal(sig) }

// WaitExit waits for the process to end and returns its exit code.
func (p *Proxy) WaitExit(t testing.TB, within time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.Cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("netproxy did not exit within %s", within)
		return -1
	}
}

// HTTPClient sends everything through the proxy's HTTP listener.
func (p *Proxy) HTTPClient(keepAlive bool) *http.Client {
	pu, _ := url.Parse("http://" + p.HTTP)
	return &http.Client{
		Timeout: 20 * time.Second,
		Transport: &http.Transport{
			Proxy:             http.ProxyURL(pu),
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
			DisableKeepAlives: !keepAlive,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// AdminRequest calls the admin listener; bearer "" sends no Authorization.
func (p *Proxy) AdminRequest(t testing.TB, method, path, bearer string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+p.Admin+path, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// ControlClient talks HTTP over the control socket.
func (p *Proxy) ControlClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", p.Control)
	}}}
}

// Registration is the control API's answer to POST /v1/executions.
type Registration struct {
	ExecutionID string `json:"execution_id"`
	Token       string `json:"token"`
	HTTPProxy   string `json:"http_proxy"`
	SOCKS5Proxy string `json:"socks5_proxy"`
}

// Register registers an execution and returns its id and token.
func (p *Proxy) Register(t testing.TB, session, env string) Registration {
	t.Helper()
	body := fmt.Sprintf(`{"session_id":%q,"environment_id":%q,"command":["curl"],"cwd":"/tmp"}`, session, env)
	resp, err := p.ControlClient().Post("http://netproxy/v1/executions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r Registration
	if resp.StatusCode != 201 || json.NewDecoder(resp.Body).Decode(&r) != nil || r.Token == "" {
		t.Fatalf("register: status %d", resp.StatusCode)
	}
	return r
}

// Revoke ends an execution.
func (p *Proxy) Revoke(t testing.TB, id string) {
	t.Helper()
	req, _ := http.NewRequest("DELETE", "http://netproxy/v1/executions/"+id, nil)
	resp, err := p.ControlClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("DELETE execution: %d", resp.StatusCode)
	}
}

// Frame is the attribution frame for token.
func Frame(token string) []byte {
	b := []byte("\x00CDXPXY1")
	b = binary.BigEndian.AppendUint16(b, uint16(len(token)))
	return append(b, token...)
}

// Upstream is an origin server on 127.0.0.1 (TLS with a throw-away
// certificate when TLS is set): /hello, /echo (the body), /big (1 MiB),
// /headers (the request headers as JSON); every request is counted.
type Upstream struct {
	Port int
	TLS  bool
	hits atomic.Int64
	srv  *http.Server
	mu   sync.Mutex
	last http.Header
}

// Hello is the body of /hello.
const Hello = "hello from upstream"

// BigBody is the deterministic 1 MiB body of /big.
var BigBody = func() []byte {
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}()

// StartUpstream starts an origin server; it stops when the test ends.
func StartUpstream(t testing.TB, useTLS bool) *Upstream {
	t.Helper()
	u := &Upstream{TLS: useTLS}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.mu.Lock()
		u.last = r.Header.Clone()
		u.mu.Unlock()
		switch r.URL.Path {
		case "/hello":
			io.WriteString(w, Hello)
		case "/echo":
			io.Copy(w, r.Body)
		case "/big":
			w.Write(BigBody)
		case "/chunked":
			w.Header().Set("Connection", "X-Hop")
			w.Header().Set("X-Hop", "must-not-pass")
			w.Header().Set("Keep-Alive", "timeout=5")
			for i := 0; i < 3; i++ {
				fmt.Fprintf(w, "part%d;", i)
				w.(http.Flusher).Flush()
			}
		default:
			fmt.Fprintf(w, "upstream %s %s", r.Method, r.URL.Path)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Port = ln.Addr().(*net.TCPAddr).Port
	u.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if useTLS {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}})
	}
	go u.srv.Serve(ln)
	t.Cleanup(func() { u.srv.Close() })
	return u
}

// Hits counts the requests served.
func (u *Upstream) Hits() int64 { return u.hits.Load() }

// LastHeaders are the headers of the latest request.
func (u *Upstream) LastHeaders() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last.Clone()
}

// URL is the upstream's URL under host (a [dns.hosts] name).
func (u *Upstream) URL(host, path string) string {
	scheme := "http"
	if u.TLS {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s:%d%s", scheme, host, u.Port, path)
}

func selfSigned(t testing.TB) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "e2e upstream"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		DNSNames:     []string{"up.test", "localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// CurlResult is a finished curl run.
type CurlResult struct {
	Exit           int
	Stdout, Stderr string
}

// Curl runs curl -sS with a 15 s limit and no proxy variables.
func Curl(t testing.TB, args ...string) CurlResult {
	t.Helper()
	path, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is required (scripts/install-test-deps.sh installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"-sS", "--max-time", "15", "--noproxy", ""}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return CurlResult{Exit: code, Stdout: out.String(), Stderr: errb.String()}
}

// RawExchange dials addr, writes data, and returns everything read until
// the peer closes or within passes.
func RawExchange(t testing.TB, addr string, data []byte, within time.Duration) (string, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(data)
	c.SetReadDeadline(time.Now().Add(within))
	out, err := io.ReadAll(c)
	return string(out), err
}

// SocksConnect performs a no-auth SOCKS5 CONNECT to host:port (a name,
// sent as a domain name) after prefix, and returns the reply code and the
// open connection (nil reply when the server closed first).
func SocksConnect(t testing.TB, addr string, prefix []byte, cmd byte, host string, port int) (rep int, conn net.Conn) {
	t.Helper()
	c, sel := SocksGreet(t, addr, prefix, 0x00)
	if sel < 0 {
		return -1, c
	}
	req := []byte{0x05, cmd, 0x00, 0x03, byte(len(host))}
	req = append(req, host...)
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	c.Write(req)
	var head [10]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return -1, c
	}
	c.SetDeadline(time.Time{})
	return int(head[1]), c
}

// SocksGreet dials addr and sends prefix and a SOCKS5 greeting offering
// methods; it returns the open connection and the method the server chose
// (-1 when it closed first).
func SocksGreet(t testing.TB, addr string, prefix []byte, methods ...byte) (net.Conn, int) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(15 * time.Second))
	c.Write(append(append(append([]byte{}, prefix...), 0x05, byte(len(methods))), methods...))
	var sel [2]byte
	if _, err := io.ReadFull(c, sel[:]); err != nil {
		return c, -1
	}
	return c, int(sel[1])
}

// NetproxyCmd prepares a netproxy command with the proxy's environment.
func NetproxyCmd(t testing.TB, p *Proxy, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(netproxyBin, args...)
	cmd.Env = p.Env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}
