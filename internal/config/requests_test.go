package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRequestRulesConfig: [[network.requests]] reach the policy in file
// order; every bad field is named file:line and key; rules without [mitm]
// are an error naming the first rule.
func TestRequestRulesConfig(t *testing.T) {
	dir := t.TempDir()
	writePEMPair(t, dir, "ca")
	mitm := "[mitm]\nenabled = true\nca_cert = \"ca.pem\"\nca_key = \"ca-key.pem\"\n\n"
	write := func(body string) string {
		p := filepath.Join(dir, "netproxy.toml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rules := `[[network.requests]]
hosts = ["github.com"]
methods = ["POST"]
paths = ["/*/*/git-receive-pack"]
action = "deny"
message = "read only"

[[network.requests]]
hosts = ["github.com:443"]
paths = ["/*/*/git-upload-pack"]
action = "allow"

[[network.requests]]
hosts = ["x.test"]
paths = ["no-slash", "/ok"]
action = "ask"
`
	_, err := Load(write(mitm + rules))
	if err == nil || !strings.Contains(err.Error(), "netproxy.toml:20: network.requests[2].paths[0]:") {
		t.Fatalf("bad path: %v", err)
	}
	good := strings.Replace(rules, `"no-slash", `, "", 1)
	c, err := Load(write(mitm + good))
	if err != nil {
		t.Fatal(err)
	}
	o, err := PolicyOptions(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Requests) != 3 || o.Requests[0].Message != "read only" || o.Requests[1].Action != "allow" || o.Requests[2].Key != "network.requests[2]" {
		t.Fatalf("%+v", o.Requests)
	}
	_, err = Load(write(good))
	if err == nil || !strings.Contains(err.Error(), "netproxy.toml:1: network.requests[0]: [mitm] enabled = true is needed") {
		t.Fatalf("without mitm: %v", err)
	}
	_, err = Load(write(mitm + strings.Replace(good, `action = "allow"`, `action = "permit"`, 1)))
	if err == nil || !strings.Contains(err.Error(), `network.requests[1].action: "permit"`) {
		t.Fatalf("bad action: %v", err)
	}
}
