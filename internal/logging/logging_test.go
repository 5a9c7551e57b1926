package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/observe"
)

func TestNewFormatsAndLevels(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(config.Log{Level: "warn", Format: "json"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown", "k", "v")
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil || m["msg"] != "shown" || m["k"] != "v" {
		t.Fatalf("json log = %q (%v)", buf.String(), err)
	}
	buf.Reset()
	l, err = New(config.Log{}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	l.Debug("hidden")
	l.Info("shown")
	if got := buf.String(); !strings.Contains(got, "msg=shown") || strings.Contains(got, "hidden") {
		t.Fatalf("text log at default level = %q", got)
	}
	if _, err := New(config.Log{Level: "loud"}, &buf); err == nil || !strings.Contains(err.Error(), "log.level") {
		t.Fatalf("bad level error = %v", err)
	}
	if _, err := New(config.Log{Format: "xml"}, &buf); err == nil || !strings.Contains(err.Error(), "log.format") {
		t.Fatalf("bad format error = %v", err)
	}
}

func TestDecisionLogOneLinePerBlockWithoutSecrets(t *testing.T) {
	const secret = "s3cr3t"
	var buf bytes.Buffer
	sink := DecisionLog{Logger: slog.New(slog.NewJSONHandler(&buf, nil))}
	var _ observe.DecisionSink = sink
	blocked := observe.DecisionEvent{
		Request: hostpolicy.Request{Host: "Evil.test?x=" + secret, Port: 80, Protocol: hostpolicy.ProtoHTTP,
			Method: "GET /?token=" + secret, Client: "127.0.0.1:1", ExecutionID: "exec-9"},
		Decision: hostpolicy.Decision{Verdict: hostpolicy.Deny, Reason: hostpolicy.ReasonDenied, Source: hostpolicy.SourceBaseline, Host: "evil.test", Port: 80},
	}
	sink.ObserveDecision(blocked)
	sink.ObserveDecision(observe.DecisionEvent{Decision: hostpolicy.Decision{Verdict: hostpolicy.Allow, Host: "ok.test"}}) // debug: not shown
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines, want 1: %q", len(lines), buf.String())
	}
	if strings.Contains(buf.String(), secret) {
		t.Fatalf("secret logged: %s", buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"msg": "request blocked", "reason": "denied", "execution_id": "exec-9", "host": "evil.test", "level": "INFO"} {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	DecisionLog{}.ObserveDecision(blocked) // nil logger: no panic
}
