package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProxyAuthConfig(t *testing.T) {
	c, err := Parse([]byte(`[proxy_auth]
required = true
[[proxy_auth.clients]]
name = "ci-runner"
secret_env = "NETPROXY_CLIENT_CI"
allow = ["*.pypi.org"]
mode = "limited"
[[proxy_auth.clients]]
name = "dev"
secret_file = "dev.secret"
`), filepath.Join("/etc/np", "n.toml"))
	if err != nil {
		t.Fatal(err)
	}
	pa := c.ProxyAuth
	if !pa.Required || len(pa.Clients) != 2 || pa.Clients[1].SecretFile != "/etc/np/dev.secret" {
		t.Fatalf("%+v", pa)
	}
	if sc, err := pa.Clients[0].Scope(); err != nil || sc == nil || sc.Level() != "client" {
		t.Fatalf("ci-runner's scope: %v %v", sc, err)
	}
	if sc, err := pa.Clients[1].Scope(); err != nil || sc != nil {
		t.Fatalf("dev narrows nothing: %v %v", sc, err)
	}
	if d := Default().ProxyAuth; d.Required || len(d.Clients) != 0 {
		t.Fatalf("default [proxy_auth] %+v", d)
	}

	p := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(p, []byte(`[proxy_auth]
required = true
color = "red"
[[proxy_auth.clients]]
name = "a:b"
[[proxy_auth.clients]]
name = "dup"
secret_env = "X"
secret_file = "y"
[[proxy_auth.clients]]
name = "dup"
secret_env = "1BAD"
allow = ["bad host!"]
mode = "half"
secret = "inline"
`), 0o644)
	var msgs []string
	for _, e := range Validate(p) {
		msgs = append(msgs, e.Error())
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{
		"proxy_auth.color", "proxy_auth.clients.secret",
		"bad.toml:5: proxy_auth.clients[0].name", "proxy_auth.clients[0].secret_env: missing",
		"proxy_auth.clients[1].secret_file: set only one", "proxy_auth.clients[2].name: \"dup\" is already the name of proxy_auth.clients[1]",
		"proxy_auth.clients[2].secret_env: \"1BAD\" is not a variable name", "proxy_auth.clients[2].mode", "proxy_auth.clients[2].allow[0]",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q in:\n%s", want, all)
		}
	}
	os.WriteFile(p, []byte("[proxy_auth]\nrequired = true\n"), 0o644)
	if errs := Validate(p); len(errs) != 1 || !strings.Contains(errs[0].Error(), "proxy_auth.required") {
		t.Fatalf("required without clients: %v", errs)
	}
}
