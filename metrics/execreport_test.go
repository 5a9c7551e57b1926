package metrics

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/netproxy/netproxy/metrics/audit"
)

func TestExecDecisionHandlerCountsAndAudits(t *testing.T) {
	m := New(0)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := audit.Open(path, 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ExecDecisionHandler(m, a))
	defer srv.Close()
	post := func(body string) int {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := post(`{"requirement":"forbidden","source":"prefix","reason":"blocked by rule","execution_id":"x1","command":["curl","-H","Authorization: Bearer SECRETTOKEN"]}`); c != 204 {
		t.Fatalf("valid report = %d", c)
	}
	for _, bad := range []string{`{}`, `{"requirement":"maybe","source":"prefix"}`, `{"requirement":"skip"}`, `{"requirement":"skip","source":"x","extra":1}`, `not json`, `{"requirement":"skip","source":"x"} {}`} {
		if c := post(bad); c != 400 {
			t.Errorf("report %s = %d, want 400", bad, c)
		}
	}
	if v := testutil.ToFloat64(m.execDecisions.WithLabelValues("forbidden", "prefix")); v != 1 {
		t.Fatalf("exec_decisions_total = %v", v)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if bytes.Count(raw, []byte("\n")) != 1 || !bytes.Contains(raw, []byte(`"event":"exec_decision"`)) || !bytes.Contains(raw, []byte(`"execution_id":"x1"`)) {
		t.Fatalf("audit = %s", raw)
	}
	if bytes.Contains(raw, []byte("SECRETTOKEN")) || bytes.Contains(raw, []byte("curl")) {
		t.Fatalf("command reached the audit: %s", raw)
	}
}
