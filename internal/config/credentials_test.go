package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestCredentialsConfig(t *testing.T) {
	dir := t.TempDir()
	writePEMPair(t, dir, "ca")
	mitm := "[mitm]\nenabled = true\nca_cert = \"ca.pem\"\nca_key = \"ca-key.pem\"\n\n"
	cfgFile := func(body string) string {
		p := filepath.Join(dir, "netproxy.toml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := `[[credentials]]
name = "openai"
hosts = ["api.openai.com"]
header = "Authorization"
format = "Bearer {secret}"
secret_file = "secrets/openai"
env = "OPENAI_API_KEY"
`
	c, err := Load(cfgFile(mitm + good))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Credentials) != 1 || c.Credentials[0].SecretFile != filepath.Join(dir, "secrets/openai") {
		t.Fatalf("%+v", c.Credentials)
	}
	if specs := c.CredentialSpecs(); specs[0].Env != "OPENAI_API_KEY" || specs[0].Hosts[0] != "api.openai.com" {
		t.Fatalf("%+v", specs)
	}

	// Two credentials sharing a host pattern for one header: file:line of the second.
	dup := mitm + good + `
[[credentials]]
name = "second"
hosts = ["example.org", "API.OpenAI.com"]
header = "authorization"
format = "Bearer {secret}"
secret_env = "X"
`
	_, err = Load(cfgFile(dup))
	if err == nil {
		t.Fatal("a shared host pattern was accepted")
	}
	lines := strings.Split(dup, "\n")
	want := 0
	for i, l := range lines {
		if strings.HasPrefix(l, `hosts = ["example.org"`) {
			want = i + 1
		}
	}
	if !strings.Contains(err.Error(), "netproxy.toml:"+strconv.Itoa(want)+": credentials[1].hosts[1]") {
		t.Fatalf("want file:%d credentials[1].hosts[1], got %v", want, err)
	}

	for body, key := range map[string]string{
		good: "credentials", // no [mitm]
		mitm + strings.Replace(good, `format = "Bearer {secret}"`, `format = "Bearer"`, 1):  "credentials[0].format",
		mitm + strings.Replace(good, `hosts = ["api.openai.com"]`, `hosts = ["*"]`, 1):      "credentials[0].hosts[0]",
		mitm + strings.Replace(good, `secret_file = "secrets/openai"`, ``, 1):               "credentials[0].secret_env",
		mitm + strings.Replace(good, `name = "openai"`, `name = "openai"`+"\nbogus = 1", 1): "credentials.bogus",
	} {
		_, err := Load(cfgFile(body))
		if err == nil || !strings.Contains(err.Error(), key+":") {
			t.Errorf("want an error at %s, got %v\n%s", key, err, body)
		}
	}
}
