package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGuardianEvalUsageErrors(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "c.jsonl"), []byte(`{"name":"a","expect":"deny","category":"c","request":{"kind":"network","host":"h.test"}}`+"\n"), 0o644)
	cases := map[string]struct {
		args []string
		want string
	}{
		"no subcommand":  {nil, "usage: netproxy guardian eval"},
		"wrong sub":      {[]string{"run"}, "usage: netproxy guardian eval"},
		"no corpus":      {[]string{"eval", "--backend", "openai"}, "usage"},
		"no backend":     {[]string{"eval", "--corpus", dir}, "no backend"},
		"bad backend":    {[]string{"eval", "--corpus", dir, "--backend", "oracle"}, "guardian.backend"},
		"missing model":  {[]string{"eval", "--corpus", dir, "--backend", "openai", "--url", "http://127.0.0.1:1/v1"}, "guardian.model"},
		"missing corpus": {[]string{"eval", "--corpus", filepath.Join(dir, "nope"), "--backend", "openai"}, "no *.jsonl"},
		"bad config":     {[]string{"eval", "--corpus", dir, "--config", filepath.Join(dir, "missing.toml")}, "missing.toml"},
	}
	for name, c := range cases {
		var out, errb bytes.Buffer
		if code := run(append([]string{"guardian"}, c.args...), &out, &errb); code != exitUsage || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", name, code, errb.String(), exitUsage, c.want)
		}
	}
}
