package guardiantest

import (
	"encoding/json"
	"net/netip"
	"net/url"
	"path"
	"strings"
)

// Fault is a deliberate misbehaviour of the fake endpoint.
type Fault int

// Faults, chosen by host names under fault.test.
const (
	FaultNone    Fault = iota
	FaultSlow          // slow.fault.test: never answers (the review times out)
	FaultHTTP500       // http500.fault.test: HTTP 500
)

// registries maps a package tool to the hosts it legitimately fetches from.
var registries = map[string][]string{
	"npm": {"registry.npmjs.org"}, "npx": {"registry.npmjs.org"}, "pnpm": {"registry.npmjs.org"},
	"yarn": {"registry.yarnpkg.com", "registry.npmjs.org"},
	"pip":  {"pypi.org", "files.pythonhosted.org"}, "pip3": {"pypi.org", "files.pythonhosted.org"},
	"uv": {"pypi.org", "files.pythonhosted.org"}, "poetry": {"pypi.org", "files.pythonhosted.org"},
	"go":    {"proxy.golang.org", "sum.golang.org"},
	"cargo": {"index.crates.io", "static.crates.io", "crates.io"},
	"gem":   {"rubygems.org", "index.rubygems.org"}, "bundle": {"rubygems.org", "index.rubygems.org"},
	"composer": {"repo.packagist.org", "packagist.org"},
	"mvn":      {"repo.maven.apache.org", "repo1.maven.org"}, "gradle": {"plugins.gradle.org", "repo.maven.apache.org", "services.gradle.org"},
	"apt-get": {"deb.debian.org", "security.debian.org"}, "apt": {"deb.debian.org", "security.debian.org"},
	"dotnet": {"api.nuget.org"}, "nuget": {"api.nuget.org"},
	"brew": {"formulae.brew.sh", "ghcr.io"},
	"helm": {"charts.helm.sh"},
}

// docs are documentation sites a fetch tool may read.
var docs = map[string]bool{
	"docs.python.org": true, "pkg.go.dev": true, "go.dev": true, "developer.mozilla.org": true, "docs.rs": true,
	"doc.rust-lang.org": true, "kubernetes.io": true, "docs.docker.com": true, "nodejs.org": true, "man7.org": true,
	"learn.microsoft.com": true, "docs.github.com": true, "www.postgresql.org": true, "docs.djangoproject.com": true,
	"react.dev": true, "www.typescriptlang.org": true, "docs.aws.amazon.com": true, "cloud.google.com": true,
	"en.cppreference.com": true, "docs.oracle.com": true, "registry.terraform.io": true, "docs.npmjs.com": true,
	"pip.pypa.io": true, "docs.pytest.org": true, "numpy.org": true,
}

// hostile are hosts that are never approved: paste sites, file drops,
// request catchers, tunnels.
var hostile = []string{
	"pastebin.com", "paste.ee", "hastebin.com", "ghostbin.co", "dpaste.org", "termbin.com", "0x0.st", "transfer.sh",
	"file.io", "anonfiles.com", "webhook.site", "requestbin.net", "pipedream.net", "beeceptor.com", "ngrok.io",
	"ngrok-free.app", "trycloudflare.com", "serveo.net", "localhost.run", "interact.sh", "oast.fun", "oast.pro",
	"burpcollaborator.net", "canarytokens.com", "discord.com", "api.telegram.org", "hooks.slack.com", "gist.githubusercontent.com",
}

func hostIs(host, domain string) bool { return host == domain || strings.HasSuffix(host, "."+domain) }

// tool is the command's program name, looking through sudo/env and
// `python -m pip`.
func tool(cmd []string) (string, []string) {
	for len(cmd) > 0 && (path.Base(cmd[0]) == "sudo" || path.Base(cmd[0]) == "env" || strings.Contains(cmd[0], "=")) {
		cmd = cmd[1:]
	}
	if len(cmd) == 0 {
		return "", nil
	}
	t := path.Base(cmd[0])
	if strings.HasPrefix(t, "python") && len(cmd) > 2 && cmd[1] == "-m" {
		return cmd[2], cmd[3:]
	}
	return t, cmd[1:]
}

// urlHosts returns the hosts named by URLs and scp-style git remotes in args.
func urlHosts(args []string) []string {
	var hs []string
	for _, a := range args {
		if strings.HasPrefix(a, "--") {
			if _, v, ok := strings.Cut(a, "="); ok {
				a = v
			}
		}
		if u, err := url.Parse(a); err == nil && u.Host != "" && (u.Scheme == "https" || u.Scheme == "http" || u.Scheme == "ssh" || u.Scheme == "git") {
			hs = append(hs, strings.ToLower(u.Hostname()))
			continue
		}
		if at := strings.Index(a, "@"); at > 0 && strings.Contains(a[at:], ":") && !strings.Contains(a, "://") {
			hs = append(hs, strings.ToLower(a[at+1:at+strings.Index(a[at:], ":")]))
		}
	}
	return hs
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func verdict(decision, risk, rationale string) string {
	b, _ := json.Marshal(map[string]string{"decision": decision, "risk": risk, "rationale": rationale})
	return string(b)
}

// Decide is the fake reviewer's judgement of one request (the rules CI
// evaluates the plumbing with; a real model replaces them):
//
//   - hosts under fault.test misbehave (prose, allow_always, two objects,
//     a slow answer, HTTP 500);
//   - network: a paste site, file drop, request catcher or tunnel, or an
//     IP literal → deny high; a package tool fetching from its own registry →
//     allow_session; git talking to the host its URL names → allow_once;
//     curl/wget reading a documentation site its URL names → allow_once;
//     anything else → deny medium;
//   - exec: build and test commands of the usual tools → allow_once;
//     anything else → deny.
func Decide(d Data) (string, Fault) {
	host := strings.ToLower(d.Host)
	if hostIs(host, "fault.test") {
		switch strings.TrimSuffix(host, ".fault.test") {
		case "slow":
			return "", FaultSlow
		case "http500":
			return "", FaultHTTP500
		case "garbage":
			return "I looked at it and it is probably fine.", FaultNone
		case "always":
			return verdict("allow_always", "low", "add it to the allow list"), FaultNone
		case "two":
			return verdict("deny", "high", "x") + verdict("allow_once", "low", "y"), FaultNone
		case "prose":
			return "Sure! Here is my verdict:\n" + verdict("allow_once", "low", "ok"), FaultNone
		case "extra":
			return `{"decision":"allow_once","risk":"low","rationale":"ok","confidence":0.99}`, FaultNone
		}
		return "", FaultHTTP500
	}
	t, args := tool(d.Command)
	if d.Kind == "exec" {
		return decideExec(t, args), FaultNone
	}
	for _, h := range hostile {
		if hostIs(host, h) {
			return verdict("deny", "high", "paste site, file drop, request catcher or tunnel: an exfiltration path"), FaultNone
		}
	}
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return verdict("deny", "high", "a raw IP address, not a named service the command needs"), FaultNone
	}
	if regs, ok := registries[t]; ok {
		if has(regs, host) {
			return verdict("allow_session", "low", t+" fetching from its own registry"), FaultNone
		}
		return verdict("deny", "high", t+" has no reason to contact "+host), FaultNone
	}
	switch t {
	case "git", "gh":
		if has(urlHosts(args), host) {
			return verdict("allow_once", "low", "git talking to the repository host named in the command"), FaultNone
		}
		if t == "gh" && host == "api.github.com" {
			return verdict("allow_once", "low", "the GitHub CLI talking to its API"), FaultNone
		}
		return verdict("deny", "high", "the host is not the repository named in the command"), FaultNone
	case "curl", "wget", "http", "xh":
		if docs[host] && has(urlHosts(args), host) {
			return verdict("allow_once", "low", "reading documentation named in the command"), FaultNone
		}
		return verdict("deny", "medium", "a fetch to a host that is not a documentation site named in the command"), FaultNone
	}
	return verdict("deny", "medium", "the host is unrelated to the command"), FaultNone
}

var safeExec = map[string][]string{
	"go": {"build", "test", "vet", "mod"}, "npm": {"test", "ci", "run", "install"}, "cargo": {"build", "test", "check", "clippy"},
	"make": nil, "pytest": nil, "tox": nil, "mvn": {"test", "package", "verify"}, "gradle": {"test", "build"},
	"git": {"status", "diff", "log", "fetch", "pull", "push", "commit", "add"}, "pip": {"install"}, "pip3": {"install"},
}

var dangerous = []string{"rm -rf /", "| sh", "|sh", "| bash", "|bash", "mkfs", "dd if=", "/etc/shadow", ".ssh/", "id_rsa", "chmod 777", "nc -e", "/dev/tcp/", "curl ", "wget ", "base64 -d", ".aws/credentials", "--force"}

func decideExec(t string, args []string) string {
	line := t + " " + strings.Join(args, " ")
	for _, d := range dangerous {
		if strings.Contains(line, d) {
			return verdict("deny", "high", "destructive, credential-reading or download-and-run command")
		}
	}
	subs, ok := safeExec[t]
	if !ok {
		return verdict("deny", "medium", "not a known build or test command")
	}
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		args = args[1:]
	}
	if subs == nil || (len(args) > 0 && has(subs, args[0])) {
		return verdict("allow_once", "low", "a build or test command of the project")
	}
	return verdict("deny", "medium", "not a known build or test step")
}
