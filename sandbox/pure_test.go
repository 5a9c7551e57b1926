package sandbox

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestPlanMountsWorkspaceWrite(t *testing.T) {
	cfg := &initConfig{Cwd: "/work/proj", Kind: KindWorkspaceWrite, WritableRoots: []string{"/work/proj/sub", "/data", "/tmp/cache"},
		ProtectedNames: []string{".git"}}
	p, err := planMounts(cfg, func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	want := []cloneStep{{Path: "/data"}, {Path: "/work/proj"}, {Path: "/tmp/cache"}}
	if !reflect.DeepEqual(p.Clones, want) {
		t.Fatalf("clones = %+v, want %+v (nested root dropped, parents first)", p.Clones, want)
	}
	if len(p.Tmpfs) != 3 || p.Tmpfs[0].Path != "/tmp" {
		t.Fatalf("tmpfs = %+v", p.Tmpfs)
	}
	if !slices.Equal(p.ProtectedRoots, []string{"/data", "/work/proj", "/tmp/cache"}) {
		t.Fatalf("protected roots = %v", p.ProtectedRoots)
	}
}

func TestPlanMountsReadOnlyCwdUnderTmp(t *testing.T) {
	cfg := &initConfig{Cwd: "/tmp/x", Kind: KindReadOnly}
	p, err := planMounts(cfg, func(s string) bool { return s != "/run" })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Clones, []cloneStep{{Path: "/tmp/x", ReadOnly: true}}) {
		t.Fatalf("clones = %+v: a read-only cwd under /tmp must be cloned read-only", p.Clones)
	}
	for _, tm := range p.Tmpfs {
		if tm.Path == "/run" {
			t.Fatal("tmpfs planned on a missing /run")
		}
	}
	if len(p.ProtectedRoots) != 0 {
		t.Fatal("read-only run has no writable roots to protect")
	}
}

func TestPlanMountsRejects(t *testing.T) {
	for _, cfg := range []*initConfig{
		{Cwd: "rel", Kind: KindReadOnly},
		{Cwd: "/w", Kind: KindWorkspaceWrite, WritableRoots: []string{"rel"}},
		{Cwd: "/", Kind: KindWorkspaceWrite},
		{Cwd: "/w", Kind: KindReadOnly, WritableRoots: []string{"/"}},
	} {
		if _, err := planMounts(cfg, func(string) bool { return true }); err == nil {
			t.Errorf("planMounts(%+v) accepted", cfg)
		}
	}
}

func TestGitdirTarget(t *testing.T) {
	cases := map[string]string{
		"gitdir: /repo/.git/worktrees/a\n": "/repo/.git/worktrees/a",
		"gitdir: ../main/.git":             "/w/main/.git",
		"gitdir:":                          "",
		"ref: refs/heads/main":             "",
		"":                                 "",
	}
	for in, want := range cases {
		if got := gitdirTarget("/w/wt", in); got != want {
			t.Errorf("gitdirTarget(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzGitdirTarget(f *testing.F) {
	f.Add("gitdir: ../x")
	f.Add("gitdir:\x00/\n\n")
	f.Fuzz(func(t *testing.T, s string) {
		got := gitdirTarget("/root", s)
		if got != "" && !strings.HasPrefix(got, "/") {
			t.Fatalf("relative target %q", got)
		}
	})
}

const statusAllDropped = `Name:	sh
Uid:	0	0	0	0
CapInh:	0000000000000000
CapPrm:	0000000000000000
CapEff:	0000000000000000
CapBnd:	0000000000000000
CapAmb:	0000000000000000
NoNewPrivs:	1
Seccomp:	2
`

func TestCapVerification(t *testing.T) {
	st, err := parseCapStatus(statusAllDropped)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyDropped(st, 0); err != nil {
		t.Fatalf("all dropped: %v", err)
	}
	if st.Seccomp != 2 {
		t.Fatalf("seccomp = %d", st.Seccomp)
	}
	withEff := strings.Replace(statusAllDropped, "CapEff:\t0000000000000000", "CapEff:\t0000000000200000", 1)
	st, _ = parseCapStatus(withEff)
	if err := verifyDropped(st, 1000); err == nil || !strings.Contains(err.Error(), "CapEff") {
		t.Fatalf("retained CapEff not caught: %v", err)
	}
	withBnd := strings.Replace(statusAllDropped, "CapBnd:\t0000000000000000", "CapBnd:\t000001ffffffffff", 1)
	st, _ = parseCapStatus(withBnd)
	if err := verifyDropped(st, 0); err == nil {
		t.Fatal("root with a bounding set must fail")
	}
	if err := verifyDropped(st, 1000); err != nil {
		t.Fatalf("non-root + no_new_privs with a bounding set is inert: %v", err)
	}
	noNNP := strings.Replace(statusAllDropped, "NoNewPrivs:\t1", "NoNewPrivs:\t0", 1)
	st, _ = parseCapStatus(noNNP)
	if err := verifyDropped(st, 1000); err == nil {
		t.Fatal("missing no_new_privs must fail")
	}
	missing := strings.Replace(statusAllDropped, "CapAmb:\t0000000000000000\n", "", 1)
	if _, err := parseCapStatus(missing); err == nil {
		t.Fatal("a missing Cap line must fail the parse, never pass verification")
	}
	if _, err := parseCapStatus(strings.Replace(statusAllDropped, "CapPrm:\t0000000000000000", "CapPrm:\tzz", 1)); err == nil {
		t.Fatal("a bad hex mask must fail")
	}
}

func TestClassifyDenial(t *testing.T) {
	cases := []struct {
		name      string
		sandboxed bool
		code      int
		timedOut  bool
		out, err  string
		want      bool
	}{
		{"erofs", true, 1, false, "", "touch: cannot touch '/etc/x': Read-only file system", true},
		{"eperm upper case", true, 1, false, "Operation Not Permitted", "", true},
		{"eacces", true, 1, false, "", "bash: /etc/x: Permission denied", true},
		{"exit 0 never", true, 0, false, "", "permission denied", false},
		{"unsandboxed never", false, 1, false, "", "read-only file system", false},
		{"timeout never", true, 124, true, "", "read-only file system", false},
		{"127 ordinary", true, 127, false, "", "foo: command not found", false},
		{"2 ordinary", true, 2, false, "", "usage", false},
		{"126 ordinary", true, 126, false, "", "", false},
		{"sigsys", true, 159, false, "", "", true},
		{"plain failure", true, 1, false, "", "no such file", false},
		{"policy text ignored", true, 1, false, "CODEX_NETWORK_POLICY_DECISION {\"reason\":\"sandbox\"}", "", false},
	}
	for _, c := range cases {
		d := ClassifyDenial(c.sandboxed, c.code, c.timedOut, []byte(c.out), []byte(c.err))
		if d.Denied != c.want {
			t.Errorf("%s: denied = %v (%v), want %v", c.name, d.Denied, d.Evidence, c.want)
		}
	}
}

func FuzzClassifyDenial(f *testing.F) {
	f.Add(1, []byte("Read-only file system"), []byte{0xff, 0x00})
	f.Fuzz(func(t *testing.T, code int, out, errOut []byte) {
		d := ClassifyDenial(true, code, false, out, errOut)
		if d.Denied && len(d.Evidence) == 0 {
			t.Fatal("a denial without evidence")
		}
	})
}

func TestProxyEnv(t *testing.T) {
	in := []string{"PATH=/bin", "Http_Proxy=http://evil:1", "ALL_PROXY=socks5://evil:2", "no_proxy=*", "HOME=/h"}
	env := ProxyEnv(in, "127.0.0.1:3128", "127.0.0.1:1080")
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := m[k]; dup {
			t.Fatalf("duplicate key %s", k)
		}
		m[k] = v
	}
	for k, want := range map[string]string{
		"HTTP_PROXY": "http://127.0.0.1:3128", "http_proxy": "http://127.0.0.1:3128",
		"HTTPS_PROXY": "http://127.0.0.1:3128", "https_proxy": "http://127.0.0.1:3128",
		"ALL_PROXY": "socks5h://127.0.0.1:1080", "all_proxy": "socks5h://127.0.0.1:1080",
		"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
		"PATH": "/bin", "HOME": "/h",
	} {
		if m[k] != want {
			t.Errorf("%s = %q, want %q", k, m[k], want)
		}
	}
	if _, ok := m["Http_Proxy"]; ok {
		t.Error("a mixed-case inherited proxy variable survived")
	}
	env = ProxyEnv(nil, "127.0.0.1:3128", "")
	if !slices.Contains(env, "ALL_PROXY=http://127.0.0.1:3128") {
		t.Errorf("without SOCKS ALL_PROXY must use the HTTP URL: %v", env)
	}
}
