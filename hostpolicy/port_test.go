package hostpolicy

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPortScopedEntries: SPEC §3.2 — a port on an entry scopes it to that
// port or inclusive range; an entry without a port matches every port;
// scoped and unscoped entries of one host combine, deny still first.
func TestPortScopedEntries(t *testing.T) {
	hosts := map[string][]string{
		"api.example.com": {"93.184.216.34"}, "db.corp.test": {"93.184.216.40"},
		"a.corp.test": {"93.184.216.41"}, "web.both.test": {"93.184.216.42"},
		"reg.internal.test": {"10.20.0.5"}, "region1.glob.test": {"93.184.216.43"},
		"any.test": {"93.184.216.44"}, "mail.any.test": {"93.184.216.45"},
	}
	snap := mustCompile(t, map[string]string{
		"api.example.com:443":    "allow",
		"db.corp.test:5432":      "allow",
		"*.corp.test:8000-8999":  "allow",
		"web.both.test":          "allow",
		"web.both.test:8443":     "deny",
		"[fd00::1]:443":          "allow",
		"10.20.0.0/16:5000":      "allow",
		"reg.internal.test":      "allow",
		"region*.glob.test:8080": "allow",
		"127.0.0.1:9000":         "allow",
		"*:443":                  "allow",
		"*:25":                   "deny",
		"169.254.0.0/16:80":      "deny",
	}, false)
	e := newTestEngine(snap, staticOnly{staticResolver(hosts)}, ModeFull, nil)
	for _, c := range []struct {
		host    string
		port    uint16
		reason  Reason
		pattern string
	}{
		{"api.example.com", 443, ReasonNone, "api.example.com:443"},
		{"api.example.com", 80, ReasonNotAllowed, ""},
		{"db.corp.test", 5432, ReasonNone, "db.corp.test:5432"},
		{"db.corp.test", 5433, ReasonNotAllowed, ""},
		{"db.corp.test", 8000, ReasonNone, "*.corp.test:8000-8999"},
		{"a.corp.test", 8999, ReasonNone, "*.corp.test:8000-8999"},
		{"a.corp.test", 9000, ReasonNotAllowed, ""},
		{"a.corp.test", 7999, ReasonNotAllowed, ""},
		{"corp.test", 8000, ReasonNotAllowed, ""}, // "*." never the apex
		{"web.both.test", 80, ReasonNone, "web.both.test"},
		{"web.both.test", 8443, ReasonDenied, "web.both.test:8443"}, // deny first
		{"fd00::1", 443, ReasonNone, "fd00::1:443"},
		{"fd00::1", 80, ReasonNotAllowedLocal, ""},
		{"10.20.3.4", 5000, ReasonNone, "10.20.0.0/16:5000"},
		{"10.20.3.4", 5001, ReasonNotAllowedLocal, ""},
		// An allow prefix on a port exempts a name's answers on that port only.
		{"reg.internal.test", 5000, ReasonNone, "reg.internal.test"},
		{"reg.internal.test", 443, ReasonNotAllowedLocal, ""},
		{"region1.glob.test", 8080, ReasonNone, "region*.glob.test:8080"},
		{"region1.glob.test", 8081, ReasonNotAllowed, ""},
		{"127.0.0.1", 9000, ReasonNone, "127.0.0.1:9000"},
		{"127.0.0.1", 9001, ReasonNotAllowedLocal, ""},
		{"any.test", 443, ReasonNone, "*:443"},
		{"any.test", 444, ReasonNotAllowed, ""},
		{"mail.any.test", 25, ReasonDenied, "*:25"},
		{"169.254.169.254", 80, ReasonDenied, "169.254.0.0/16:80"},
		{"169.254.169.254", 81, ReasonNotAllowedLocal, ""},
	} {
		d := e.Evaluate(context.Background(), Request{Trace: true, Host: c.host, Port: c.port, Protocol: ProtoHTTPS, Method: "CONNECT"})
		if d.Reason != c.reason || (c.pattern != "" && d.Pattern != c.pattern) {
			t.Errorf("%s port %d: reason %q pattern %q; want %q %q (%+v)", c.host, c.port, d.Reason, d.Pattern, c.reason, c.pattern, d.Steps)
		}
		checkSteps(t, c.host, d)
	}
	// The dial-time re-check knows the ports of address entries.
	for _, c := range []struct {
		ap   string
		want Reason
	}{
		{"169.254.169.254:80", ReasonDenied},
		{"169.254.169.254:81", ReasonNotAllowedLocal},
		{"10.20.0.5:5000", ReasonNone},
		{"10.20.0.5:5001", ReasonNotAllowedLocal},
		{"93.184.216.34:25", ReasonNone}, // "*:25" is a name entry: the chain judged it
	} {
		if r, _ := snap.CheckDialAddr(netip.MustParseAddrPort(c.ap)); r != c.want {
			t.Errorf("CheckDialAddr(%s) = %q, want %q", c.ap, r, c.want)
		}
	}
	// An open connection is re-checked on its own port.
	if d := e.Recheck("web.both.test", 8443, []netip.Addr{netip.MustParseAddr("93.184.216.42")}); d.Reason != ReasonDenied {
		t.Errorf("Recheck on the denied port: %q", d.Reason)
	}
	if d := e.Recheck("web.both.test", 443, []netip.Addr{netip.MustParseAddr("93.184.216.42")}); !d.Allowed() {
		t.Errorf("Recheck on another port: %q", d.Reason)
	}
}

// TestPortScopedEntryErrors: a malformed port is an error naming the entry
// (its key or file:line).
func TestPortScopedEntryErrors(t *testing.T) {
	for _, entry := range []string{"a.test:0", "a.test:70000", "a.test:9-3", "a.test:https", "[::1]:0", "10.0.0.0/8:0", "*.a.test:", "fd00::/8:5432"} {
		_, err := Build(Options{Enabled: true, Entries: []Entry{{Pattern: entry, Decision: EntryAllow, Origin: "network.domains." + `"` + entry + `"`}}})
		if err == nil || !strings.Contains(err.Error(), `network.domains."`+entry+`"`) {
			t.Errorf("%q: %v; want an error naming the key", entry, err)
		}
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "allow.txt")
	os.WriteFile(f, []byte("ok.test:443\nbad.test:99999\n*.range.test:10-20\n"), 0o644)
	_, err := Build(Options{Enabled: true, DomainFiles: []DomainFile{{Path: f, Decision: EntryAllow, Key: "network.domain_files[0]"}}})
	if err == nil || !strings.Contains(err.Error(), f+":2") || strings.Contains(err.Error(), f+":1") || strings.Contains(err.Error(), f+":3") {
		t.Fatalf("domain file errors: %v", err)
	}
	// The deny list still refuses a global wildcard, but a port-scoped one
	// is a fence on that port.
	if err := CheckEntry("*", EntryDeny); err == nil {
		t.Fatal(`"*" accepted in the deny list`)
	}
	if err := CheckEntry("*:25", EntryDeny); err != nil {
		t.Fatalf(`"*:25" in the deny list: %v`, err)
	}
}

// TestPortScopedDomainFileAndScopes: domain files and per-execution scopes
// take port-scoped entries too; PatternCounts counts each entry once.
func TestPortScopedDomainFileAndScopes(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "allow.txt")
	os.WriteFile(f, []byte("files.test:443\n*.files.test:8000-8100\nfiles.test\n"), 0o644)
	snap, err := Build(Options{Enabled: true, Mode: ModeFull, DomainFiles: []DomainFile{{Path: f, Decision: EntryAllow}},
		DNS: DNSOptions{Hosts: map[string][]netip.Addr{"files.test": {netip.MustParseAddr("93.184.216.50")}, "a.files.test": {netip.MustParseAddr("93.184.216.51")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := snap.PatternCounts(); a != 3 {
		t.Fatalf("allow count %d, want 3", a)
	}
	e := NewEngine(snap, nil)
	for _, c := range []struct {
		host   string
		port   uint16
		reason Reason
	}{{"a.files.test", 8050, ReasonNone}, {"a.files.test", 8101, ReasonNotAllowed}, {"files.test", 1, ReasonNone}} {
		if d := e.Evaluate(context.Background(), Request{Host: c.host, Port: c.port, Protocol: ProtoHTTP, Method: "GET"}); d.Reason != c.reason {
			t.Errorf("%s:%d: %q, want %q", c.host, c.port, d.Reason, c.reason)
		}
	}
	sc, err := BuildScope(LevelExecution, ScopeSpec{Allow: []string{"files.test:443"}, Deny: []string{"a.files.test:8080"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host   string
		port   uint16
		reason Reason
	}{{"files.test", 443, ReasonNone}, {"files.test", 80, ReasonPolicyDenied}, {"a.files.test", 8080, ReasonPolicyDenied}} {
		if d := e.EvaluateScoped(context.Background(), Request{Host: c.host, Port: c.port, Protocol: ProtoHTTP, Method: "GET"}, []*Scope{sc}); d.Reason != c.reason {
			t.Errorf("scoped %s:%d: %q, want %q", c.host, c.port, d.Reason, c.reason)
		}
	}
	if _, err := BuildScope(LevelExecution, ScopeSpec{Allow: []string{"x.test:0"}}); err == nil || !strings.Contains(err.Error(), "allow[0]") {
		t.Fatalf("scope error must name allow[0]: %v", err)
	}
}
