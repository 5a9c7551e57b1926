package test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestBlockCauseDNS is issue 24 item 6 (SPEC §3.7): every JSON block
// carries "cause", and a failed lookup is not presented as a
// private-address block: NXDOMAIN → dns_error, no answer within
// dns.timeout → dns_timeout, both "Host name could not be resolved." with
// reason not_allowed_local; a non-public answer stays a private-address
// block (non_public_answer). `netproxy check --json` reports the same.
func TestBlockCauseDNS(t *testing.T) {
	srv := startCountingDNS(t, map[string][]string{"private.test": {"10.9.9.9"}}, "slow.test")
	cfg := dnsPolicyConfig(srv, false)
	cfg.Domains = append(cfg.Domains, [2]string{"nx.test", "allow"})
	p := dnsProxy(t, cfg)
	proxyURL, _ := url.Parse("http://" + p.HTTP)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	type block struct {
		Reason, Cause, Message, Source string
	}
	for _, c := range []struct {
		host, cause, message string
	}{
		{"nx.test", "dns_error", "Host name could not be resolved."},
		{"slow.test", "dns_timeout", "Host name could not be resolved."},
		{"private.test", "non_public_answer", "Sandbox policy blocks local/private network addresses."},
		{"127.0.0.2", "local_literal", "Sandbox policy blocks local/private network addresses."},
		{"denied.test", "deny_list", "Domain denied by the sandbox policy."},
		{"other.test", "not_in_allowlist", "Domain not in allowlist."},
	} {
		resp, err := client.Get("http://" + c.host + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var b block
		if err := json.Unmarshal(body, &b); err != nil || resp.StatusCode != 403 || b.Cause != c.cause || b.Message != c.message {
			t.Errorf("%s: %d %s, want cause %s and %q", c.host, resp.StatusCode, body, c.cause, c.message)
		}
		if (c.cause == "dns_error" || c.cause == "dns_timeout") && b.Reason != "not_allowed_local" {
			t.Errorf("%s: reason %s, want not_allowed_local", c.host, b.Reason)
		}
		out, _ := NetproxyCmd(t, p, "check", "--config", p.ConfigPath, "--json", c.host+":80").Output()
		var chk block
		if err := json.Unmarshal(out, &chk); err != nil || chk.Cause != c.cause {
			t.Errorf("check %s: cause %q, want %q\n%s", c.host, chk.Cause, c.cause, out)
		}
	}
}

// TestReplayOwnListeners is issue 24 item 7: requests to netproxy's own
// listeners are refused (own_listener) and `netproxy replay` of that audit
// against the same config judges them the same: exit 0, no change.
// Before, replay did not apply the rule and reported block→allow.
func TestReplayOwnListeners(t *testing.T) {
	cfg := StdConfig()
	cfg.Domains = append(cfg.Domains, [2]string{"127.0.0.1", "allow"})
	p := StartProxy(t, cfg)
	r := Curl(t, "-x", "http://"+p.HTTP, "-w", "\n%{http_code}", "http://"+p.Admin+"/healthz")
	if !strings.HasSuffix(r.Stdout, "\n403") || !strings.Contains(r.Stdout, `"cause":"own_listener"`) {
		t.Fatalf("plain request to the admin listener: %q %s", r.Stdout, r.Stderr)
	}
	r = Curl(t, "-x", "http://"+p.HTTP, "-o", "/dev/null", "-w", "%{http_connect}", "https://"+p.SOCKS+"/")
	if r.Stdout != "403" {
		t.Fatalf("CONNECT to the SOCKS5 listener: %q %s", r.Stdout, r.Stderr)
	}
	waitAudit(t, p, "network_decision", 2, func(m map[string]any) bool { return m["reason"] == "not_allowed_local" })
	if code, out, stderr := runReplay(t, p, "--config", p.ConfigPath, p.Audit); code != 0 {
		t.Fatalf("replay of the same config: exit %d\n%s\n%s", code, out, stderr)
	}
}
