package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestRedisLogThroughSlog(t *testing.T) {
	var buf bytes.Buffer
	r := &redisLog{log: slog.New(slog.NewJSONHandler(&buf, nil)), secrets: []string{"s3cret"}}
	r.Printf(context.Background(), "redis: %s pool.go:770: dial tcp redis://u:s3cret@h: connection refused", "x")
	for i := 0; i < 10; i++ {
		r.Printf(context.Background(), "again %d", i)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines within a second, want 1 (rate limited): %q", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("not JSON (log.format ignored): %q", lines[0])
	}
	if rec["level"] != "WARN" || strings.Contains(lines[0], "s3cret") || !strings.Contains(lines[0], "connection refused") {
		t.Fatalf("line %q", lines[0])
	}
}
