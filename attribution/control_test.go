package attribution

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func startControl(t *testing.T) (*Registry, string, *http.Client) {
	t.Helper()
	reg := NewRegistry()
	cs := NewControlServer(reg, ProxyInfo{HTTP: "127.0.0.1:3128", SOCKS5: "127.0.0.1:1080"}, nil)
	path := filepath.Join(t.TempDir(), "sub", "control.sock")
	ln, err := ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	go cs.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		cs.Shutdown(ctx)
	})
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	return reg, path, client
}

func TestControlSocketMode(t *testing.T) {
	_, path, _ := startControl(t)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %s, want socket 0600", st.Mode())
	}
}

func TestListenUnixRefusesNonSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	os.WriteFile(path, []byte("x"), 0o600)
	if _, err := ListenUnix(path); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("ListenUnix over a regular file: %v", err)
	}
}

func TestControlRegisterRevokeEvents(t *testing.T) {
	reg, _, client := startControl(t)
	body := `{"session_id":"s1","environment_id":"e1","turn_id":"t","command":["curl","x"],"cwd":"/tmp"}`
	resp, err := client.Post("http://x/v1/executions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var got registerResponse
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != 201 || got.ExecutionID == "" || got.Token == "" || got.HTTPProxy != "127.0.0.1:3128" || got.SOCKS5Proxy != "127.0.0.1:1080" {
		t.Fatalf("register: %d %+v", resp.StatusCode, got)
	}
	if e, ok := reg.ByToken(got.Token); !ok || e.Cwd != "/tmp" || e.TurnID != "t" {
		t.Fatalf("registry has %+v %t", e, ok)
	}

	// events stream: subscribe, publish, then end the execution.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://x/v1/executions/"+got.ExecutionID+"/events", nil)
	evResp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer evResp.Body.Close()
	if ct := evResp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("content-type %q", ct)
	}
	reg.Publish(got.ExecutionID, Event{Type: EventNetworkDecision, Host: "denied.test", Port: 80, Decision: "deny", Reason: "denied"})
	sc := bufio.NewScanner(evResp.Body)
	if !sc.Scan() {
		t.Fatalf("no event line: %v", sc.Err())
	}
	var ev map[string]any
	if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev["host"] != "denied.test" || ev["type"] != "network_decision" {
		t.Fatalf("event line %s (%v)", sc.Text(), err)
	}

	del, _ := http.NewRequest("DELETE", "http://x/v1/executions/"+got.ExecutionID, nil)
	dresp, err := client.Do(del)
	if err != nil || dresp.StatusCode != 204 {
		t.Fatalf("DELETE: %v %v", dresp, err)
	}
	dresp.Body.Close()
	if !sc.Scan() || !strings.Contains(sc.Text(), EventExecutionEnded) {
		t.Fatalf("want execution_ended, got %q", sc.Text())
	}
	if sc.Scan() {
		t.Fatalf("stream continued after the end: %q", sc.Text())
	}
	if _, ok := reg.ByToken(got.Token); ok {
		t.Fatal("token accepted after DELETE")
	}
	dresp, _ = client.Do(del)
	if dresp.StatusCode != 404 {
		t.Fatalf("second DELETE %d, want 404", dresp.StatusCode)
	}
	dresp.Body.Close()
}

func TestControlRejectsBadRequests(t *testing.T) {
	_, _, client := startControl(t)
	for _, body := range []string{`{"session_id":"s"}`, `not json`, `{"session_id":"s","environment_id":"e","bogus":1}`} {
		resp, err := client.Post("http://x/v1/executions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !bytes.Contains(data, []byte("error")) {
			t.Errorf("%s: %d %s", body, resp.StatusCode, data)
		}
	}
	resp, _ := client.Get("http://x/v1/executions/nope/events")
	if resp.StatusCode != 404 {
		t.Errorf("events of an unknown execution: %d", resp.StatusCode)
	}
	resp.Body.Close()
	resp, _ = client.Post("http://x/v1/approvals", "application/json", strings.NewReader("{}"))
	if resp.StatusCode != 503 {
		t.Errorf("approvals without a service: %d, want 503", resp.StatusCode)
	}
	resp.Body.Close()
}

func TestControlRegisterNetworkPolicy(t *testing.T) {
	reg := NewRegistry()
	cs := NewControlServer(reg, ProxyInfo{HTTP: "127.0.0.1:3128"}, nil)
	post := func(body string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		cs.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/v1/executions", strings.NewReader(body)))
		var m map[string]any
		json.Unmarshal(rec.Body.Bytes(), &m)
		return rec.Code, m
	}
	body := `{"session_id":"s","environment_id":"e","command":["x"],"network":{"allow":["a.test"],"mode":"limited"}}`
	// No checker installed: a policy that cannot be enforced is refused.
	if code, _ := post(body); code != 503 {
		t.Fatalf("without a checker: %d", code)
	}
	var seen NetworkPolicy
	cs.SetNetworkCheck(func(p NetworkPolicy) ([]string, error) {
		seen = p
		if len(p.Deny) > 0 {
			return nil, errors.New("deny[0]: bad")
		}
		return []string{"note"}, nil
	})
	code, m := post(body)
	if code != 201 || fmt.Sprint(m["network_notes"]) != "[note]" || seen.Mode != "limited" {
		t.Fatalf("register: %d %v %+v", code, m, seen)
	}
	e, ok := reg.Get(m["execution_id"].(string))
	if !ok || e.Network == nil || e.Network.Allow[0] != "a.test" {
		t.Fatalf("execution lacks its policy: %+v", e)
	}
	if code, m := post(`{"session_id":"s","environment_id":"e","command":["x"],"network":{"deny":["x"]}}`); code != 400 || !strings.Contains(fmt.Sprint(m["error"]), "deny[0]") {
		t.Fatalf("bad policy: %d %v", code, m)
	}
	if code, _ := post(`{"session_id":"s","environment_id":"e","command":["x"],"network":{"widen":true}}`); code != 400 {
		t.Fatalf("unknown key: %d", code)
	}
	if len(reg.Active()) != 1 {
		t.Fatalf("a refused registration was registered: %d", len(reg.Active()))
	}
}
