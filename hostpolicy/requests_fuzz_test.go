package hostpolicy

import (
	"net/url"
	"path"
	"strings"
	"testing"
)

// refNormal is what a server that decodes once and removes dot-segments
// (RFC 3986 §5.2.4) serves for raw: the path the rules must see. ok is
// false when the reference cannot decode it.
func refNormal(raw string) (string, bool) {
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	u, err := url.PathUnescape(raw)
	if err != nil || !strings.HasPrefix(u, "/") {
		return "", false
	}
	p := path.Clean(u)
	last := u[strings.LastIndexByte(u, '/')+1:]
	if p != "/" && (strings.HasSuffix(u, "/") || last == "." || last == "..") {
		p += "/"
	}
	return p, true
}

// FuzzNormalisePath: whatever the client sends, a path the normaliser
// accepts is exactly the path a decoding, dot-segment-removing server
// serves (so a deny rule cannot be dodged by spelling), it holds no empty,
// "." or ".." segment, and normalising it again changes nothing.
func FuzzNormalisePath(f *testing.F) {
	for _, s := range []string{
		"/o/r/git-receive-pack", "/a/../o/r/git-receive-pack", "//o//r/git-receive-pack", "/o%2Fr/x",
		"/x/%2e%2e/o", "/O/R", "/a/", "/a;b", "/a%00", "/a%5Cb", "/a%252F", "/..", "/a/b/..", "/%", "/a?q=/../",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, ok := NormalisePath(raw)
		if !ok {
			return
		}
		want, rok := refNormal(raw)
		if !rok {
			t.Fatalf("%q: accepted as %q but a server cannot decode it", raw, got)
		}
		if got != want {
			t.Fatalf("%q: normalised %q, a server serves %q", raw, got, want)
		}
		body := strings.TrimSuffix(got[1:], "/")
		if body != "" {
			for _, seg := range strings.Split(body, "/") {
				if seg == "" || seg == "." || seg == ".." {
					t.Fatalf("%q: %q keeps segment %q", raw, got, seg)
				}
			}
		}
		if !strings.ContainsAny(got, "%?#") {
			if again, ok := NormalisePath(got); !ok || again != got {
				t.Fatalf("%q: %q normalises again to %q %v", raw, got, again, ok)
			}
		}
	})
}

// FuzzRequestRuleParse: any rule text is accepted or refused with errors
// naming the rule's key, never a panic; an accepted literal path pattern
// matches its own normalised path.
func FuzzRequestRuleParse(f *testing.F) {
	f.Add("github.com", "POST", "/*/*/git-receive-pack", "deny")
	f.Add("*.corp.test:8000-8999", "get", "/repos/**", "allow")
	f.Add("10.0.0.0/8:5432", "", "/a/./b", "ask")
	f.Add("[fd00::1]:443", "PO ST", "nope", "permit")
	f.Fuzz(func(t *testing.T, host, method, p, action string) {
		r := RequestRule{Hosts: []string{host}, Paths: []string{p}, Action: action, Key: "network.requests[0]"}
		if method != "" {
			r.Methods = []string{method}
		}
		errs := CheckRequestRule(r)
		for _, e := range errs {
			if !strings.HasPrefix(e.Key, "network.requests[0]") {
				t.Fatalf("error without the rule's key: %v", e)
			}
		}
		_, err := Build(Options{Enabled: true, Requests: []RequestRule{r}})
		if (err == nil) != (len(errs) == 0) {
			t.Fatalf("Build and CheckRequestRule disagree: %v vs %v", err, errs)
		}
		if len(errs) > 0 || strings.Contains(p, "*") {
			return
		}
		pat, _ := compilePathPattern(p)
		segs, ok := normalisePath(p, nil)
		if !ok || !matchSegments(pat, segs) {
			t.Fatalf("literal pattern %q does not match itself", p)
		}
	})
}
