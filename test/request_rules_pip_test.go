package test

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request rules with a real pip (SPEC §3.8, §3.10): in limited mode a
// package index over HTTPS is read through interception (a host with a rule
// is intercepted, so the mode guard sees each GET), a rule refuses one
// project's files with its own message, and an upload (a POST, as twine
// makes) is refused by the mode guard. PyPI is out of reach here, so the
// index is a local PEP 503 simple index serving a real wheel.

// demoWheel is a minimal, valid pure-Python wheel for name 1.0.
func demoWheel(t *testing.T, name string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	info := name + "-1.0.dist-info/"
	files := []struct{ path, body string }{
		{name + "/__init__.py", "VALUE = 1\n"},
		{info + "METADATA", "Metadata-Version: 2.1\nName: " + name + "\nVersion: 1.0\n"},
		{info + "WHEEL", "Wheel-Version: 1.0\nGenerator: netproxy-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.path)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.body))
		fmt.Fprintf(&record, "%s,,\n", f.path)
	}
	fmt.Fprintf(&record, "%sRECORD,,\n", info)
	w, _ := zw.Create(info + "RECORD")
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pipIndex is a PEP 503 simple index over TLS; it records the requests it
// served ("METHOD path").
type pipIndex struct {
	*Upstream
	mu   sync.Mutex
	seen []string
}

func (ix *pipIndex) served() []string {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return append([]string(nil), ix.seen...)
}

func startPipIndex(t *testing.T, projects ...string) *pipIndex {
	t.Helper()
	ix := &pipIndex{}
	mux := http.NewServeMux()
	for _, name := range projects {
		whl := demoWheel(t, name)
		sum := sha256.Sum256(whl)
		file := name + "-1.0-py3-none-any.whl"
		page := fmt.Sprintf("<!DOCTYPE html><html><body><a href=\"/packages/%s/%s#sha256=%s\">%s</a></body></html>\n",
			name, file, hex.EncodeToString(sum[:]), file)
		mux.HandleFunc("/simple/"+name+"/", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte(page))
		})
		mux.HandleFunc("/packages/"+name+"/"+file, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(whl)
		})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ix.mu.Lock()
		ix.seen = append(ix.seen, r.Method+" "+r.URL.Path)
		ix.mu.Unlock()
		mux.ServeHTTP(w, r)
	})}
	go srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}))
	t.Cleanup(func() { srv.Close() })
	ix.Upstream = &Upstream{TLS: true, Port: ln.Addr().(*net.TCPAddr).Port}
	return ix
}

const pipBlockedMessage = "netproxy: this project is not approved for agents."

func TestRequestRulesPipLimitedMode(t *testing.T) {
	// Debian's python3 and python3-pip (scripts/install-test-deps.sh).
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-m", "pip", "--version").CombinedOutput(); err != nil {
		t.Fatalf("pip is required (Debian package python3-pip): %v\n%s", err, out)
	}
	ix := startPipIndex(t, "demo", "blocked")
	rules := `[[network.requests]]
hosts = ["up.test"]
methods = ["GET"]
paths = ["/simple/blocked/**", "/packages/blocked/**"]
action = "deny"
message = "` + pipBlockedMessage + `"

[[network.requests]]
hosts = ["up.test"]
methods = ["GET", "HEAD"]
paths = ["/simple/**", "/packages/**"]
action = "allow"
`
	p, ca := startRulesProxy(t, ix.Upstream, "limited", rules)
	index := ix.URL("up.test", "/simple/")

	pip := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, py, append([]string{"-m", "pip"}, args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PIP_CONFIG_FILE=/dev/null",
			"PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1", "PYTHONDONTWRITEBYTECODE=1"}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	dest := t.TempDir()
	common := []string{"--no-cache-dir", "--proxy", "http://" + p.HTTP, "--cert", ca, "--index-url", index, "--retries", "0", "--timeout", "20"}

	// 1. pip download works in limited mode through interception.
	out, err := pip(append([]string{"download", "--no-deps", "-d", dest}, append(common, "demo==1.0")...)...)
	if err != nil {
		t.Fatalf("pip download in limited mode: %v\n%s\n%s", err, out, p.Output.String())
	}
	if _, err := os.Stat(filepath.Join(dest, "demo-1.0-py3-none-any.whl")); err != nil {
		t.Fatalf("the wheel was not downloaded: %v\n%s", err, out)
	}

	// 2. A project the deny rule names: refused before the index sees it.
	// pip treats a refused index page as "no versions"; -v shows why.
	out, err = pip(append([]string{"download", "-vv", "--no-deps", "-d", dest}, append(common, "blocked==1.0")...)...)
	if err == nil {
		t.Fatalf("pip downloaded a denied project:\n%s", out)
	}
	for _, s := range ix.served() {
		if strings.Contains(s, "/blocked") {
			t.Fatalf("the index served a denied path: %q", s)
		}
	}
	if !strings.Contains(out, "403") {
		t.Fatalf("pip does not show the proxy's 403:\n%s\nserved %q", out, ix.served())
	}

	// 3. An upload — a POST, as twine makes — is refused by the mode guard
	// (no allow rule covers it), and never reaches the index.
	r := Curl(t, "-sS", "--cacert", ca, "-x", "http://"+p.HTTP, "-X", "POST", "--data-binary", "x",
		ix.URL("up.test", "/legacy/"))
	if !strings.Contains(r.Stdout, "method_not_allowed") {
		t.Fatalf("a POST upload in limited mode: exit %d %q", r.Exit, r.Stdout)
	}
	for _, s := range ix.served() {
		if strings.HasPrefix(s, "POST") {
			t.Fatalf("the index saw an upload: %q", s)
		}
	}

	// The audit names the rule for the denied project's request, never its path.
	audit, err := os.ReadFile(p.Audit)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(audit), `"reason":"request_denied"`) || !strings.Contains(string(audit), `"rule":0`) {
		t.Fatalf("no request_denied line with rule 0 in the audit:\n%s", audit)
	}
	if strings.Contains(string(audit), "/simple/blocked") || strings.Contains(string(audit), "/packages/") {
		t.Fatalf("the audit holds a request path:\n%s", audit)
	}
}
