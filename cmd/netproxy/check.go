package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/netproxy/netproxy/approvalsvc"
	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/server"
)

// Exit codes of `netproxy check` (SPEC §7.1).
const (
	exitAllowed = 0
	exitBlocked = 10
	exitAsk     = 11
	exitUsage   = 2
)

// checkOutput is the JSON of `netproxy check --json` (SPEC §7.1).
type checkOutput struct {
	Host     string `json:"host"`
	Port     uint16 `json:"port"`
	Protocol string `json:"protocol"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Source   string `json:"source"`
	Pattern  string `json:"pattern"`
	// Cause is a block's finer cause (SPEC §3.7: dns_error, dns_timeout,
	// non_public_answer, …); "" when allowed.
	Cause string `json:"cause"`
	// Level is the narrower policy that blocked the request
	// ("execution" with --execution-policy); "" otherwise.
	Level string `json:"level"`
	// Notes say what in --execution-policy has no effect.
	Notes []string `json:"notes,omitempty"`
	// Resolved lists the addresses the chain judged (a literal, static
	// answers, or a lookup made after the allow list allowed the name);
	// empty when nothing was looked up.
	Resolved []string          `json:"resolved"`
	Steps    []hostpolicy.Step `json:"steps"`
	// Rule is the request rule that decided (SPEC §3.10); absent when none.
	Rule *int `json:"rule,omitempty"`
}

// runCheck runs the decision chain offline for the default session.
func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("netproxy check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (default: the embedded default)")
	asJSON := fs.Bool("json", false, "print the decision as JSON")
	protocol := fs.String("protocol", "http", "http | https | socks5")
	method := fs.String("method", "", "HTTP method (default GET for http, CONNECT for https)")
	path := fs.String("path", "", "request path judged by the request rules (default: the URL's, or /); with https, the request inside the intercepted tunnel")
	execPolicy := fs.String("execution-policy", "", `JSON file {"allow":[...],"deny":[...],"mode":"limited"}: judge as an execution registered with this network policy`)
	client := fs.String("client", "", "judge as the authenticated [[proxy_auth.clients]] NAME (its narrower policy; SPEC §4.4)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: netproxy check [--config FILE] [--json] [--protocol http|https|socks5] [--method M] [--path P] [--execution-policy FILE] [--client NAME] HOST[:PORT]|URL")
		fs.PrintDefaults()
	}
	if err := fs.Parse(reorderFlags(args, map[string]bool{"config": true, "protocol": true, "method": true, "path": true, "execution-policy": true, "client": true})); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "netproxy check: give exactly one HOST[:PORT]")
		fs.Usage()
		return exitUsage
	}
	target := fs.Arg(0)
	urlPath := ""
	if strings.Contains(target, "://") {
		// A URL: its scheme is the protocol, its path the request's.
		u, err := url.Parse(target)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			fmt.Fprintf(stderr, "netproxy check: %q is not an http:// or https:// URL\n", target)
			return exitUsage
		}
		*protocol, target, urlPath = u.Scheme, u.Host, u.EscapedPath()
		if urlPath == "" {
			urlPath = "/"
		}
	}

	req := hostpolicy.Request{Host: target, Client: "netproxy-check", Trace: true}
	switch *protocol {
	case "http":
		req.Protocol, req.Method, req.Port = hostpolicy.ProtoHTTP, "GET", 80
	case "https":
		req.Protocol, req.Method, req.Port = hostpolicy.ProtoHTTPS, "CONNECT", 443
	case "socks5":
		req.Protocol, req.Port = hostpolicy.ProtoSOCKS5, 80
	default:
		fmt.Fprintf(stderr, "netproxy check: --protocol %q: use http, https or socks5\n", *protocol)
		return exitUsage
	}
	if *method != "" {
		req.Method = strings.ToUpper(*method)
	}
	// A request inside an intercepted tunnel: an https URL, or --path with
	// --protocol https.
	inner := req.Protocol == hostpolicy.ProtoHTTPS && (urlPath != "" || *path != "")
	if inner && *method == "" {
		req.Method = "GET"
	}
	if req.Method != "" && req.Method != "CONNECT" {
		req.Path = cmp.Or(*path, urlPath, "/")
	}
	port, hasPort, err := targetPort(target)
	if err != nil {
		fmt.Fprintf(stderr, "netproxy check: %v\n", err)
		return exitUsage
	}
	if hasPort {
		req.Port = port
	}

	var cfg *config.Config
	if *cfgPath == "" {
		cfg = config.Default()
	} else if cfg, err = config.Load(*cfgPath); err != nil {
		printErrors(stderr, "netproxy check: invalid configuration", err)
		return exitUsage
	}
	// The same builder as serve and reload: the config, the persisted
	// network_rule amendments of $NETPROXY_HOME/rules, MITM admission.
	policy, err := server.LoadPolicy(cfg)
	if err != nil {
		printErrors(stderr, "netproxy check: invalid policy", err)
		return exitUsage
	}
	var decider hostpolicy.Decider
	if cfg.Approvals.Enabled {
		approvalPolicy, err := approvalsvc.ParsePolicy(cfg.Approvals.Policy)
		if err != nil {
			fmt.Fprintf(stderr, "netproxy check: approvals.policy: %v\n", err)
			return exitUsage
		}
		decider = checkDecider{policy: approvalPolicy}
	}
	engine := hostpolicy.NewEngine(policy, decider)
	var scopes []*hostpolicy.Scope
	var notes []string
	if *client != "" {
		sc, err := clientScope(cfg, *client)
		if err != nil {
			fmt.Fprintf(stderr, "netproxy check: --client: %v\n", err)
			return exitUsage
		}
		if sc != nil {
			scopes = append(scopes, sc)
		}
		req.Client, req.SessionID = *client, attribution.ClientSessionPrefix+*client
	}
	if *execPolicy != "" {
		spec, err := readScopeFile(*execPolicy)
		if err == nil {
			var sc *hostpolicy.Scope
			if sc, err = hostpolicy.BuildScope(hostpolicy.LevelExecution, spec); err == nil {
				scopes = append(scopes, sc)
				notes = policy.Notes(spec)
			} else {
				err = fmt.Errorf("%s: %w", *execPolicy, err)
			}
		}
		if err != nil {
			printErrors(stderr, "netproxy check: invalid --execution-policy", err)
			return exitUsage
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var d hostpolicy.Decision
	if inner {
		// Judged as the tunnel's inner request would be (the CONNECT's
		// review is not re-asked).
		d = engine.InnerDecisionScoped(ctx, req, scopes)
	} else {
		d = engine.EvaluateScoped(ctx, req, scopes)
	}

	out := checkOutput{
		Host: d.Host, Port: d.Port, Protocol: string(req.Protocol), Decision: string(d.Verdict),
		Reason: string(d.Reason), Source: string(d.Source), Pattern: d.Pattern,
		Cause: blockCause(d), Level: d.Level, Notes: notes, Resolved: []string{}, Steps: d.Steps,
	}
	if out.Steps == nil {
		out.Steps = []hostpolicy.Step{}
	}
	if i, ok := d.RuleIndex(); ok {
		out.Rule = &i
	}
	for _, a := range d.Addrs {
		out.Resolved = append(out.Resolved, a.String())
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "netproxy check: %v\n", err)
			return exitUsage
		}
	} else {
		printHuman(stdout, out, d)
	}
	switch d.Verdict {
	case hostpolicy.Allow:
		return exitAllowed
	case hostpolicy.Ask:
		return exitAsk
	}
	return exitBlocked
}

// checkDecider stands in for the approval service offline: it says what the
// service would do with not_allowed without asking anyone. Policy "never"
// fails closed (deny); any other policy would ask a reviewer.
type checkDecider struct{ policy approvalsvc.ApprovalPolicy }

func (c checkDecider) Decide(_ context.Context, _ hostpolicy.Request, base hostpolicy.Decision) hostpolicy.Decision {
	d := base
	d.Source = hostpolicy.SourceDecider
	if d.Reason != hostpolicy.ReasonRequestDenied { // an ask request rule keeps its reason
		d.Reason = hostpolicy.ReasonNotAllowed
	}
	if c.policy.Kind == approvalsvc.PolicyNever {
		d.Verdict = hostpolicy.Deny
		d.Rationale = "approval policy never: the approval service denies"
	} else {
		d.Verdict = hostpolicy.Ask
		d.Rationale = "the approval service would ask a reviewer"
	}
	return d
}

// targetPort extracts an explicit port from HOST:PORT or [V6]:PORT.
func targetPort(t string) (uint16, bool, error) {
	t = strings.TrimSpace(t)
	var p string
	if strings.HasPrefix(t, "[") {
		end := strings.IndexByte(t, ']')
		if end < 0 || !strings.HasPrefix(t[end+1:], ":") {
			return 0, false, nil
		}
		p = t[end+2:]
	} else if strings.Count(t, ":") == 1 {
		p = t[strings.IndexByte(t, ':')+1:]
	} else {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, false, fmt.Errorf("target %q: port %q is not a number 1–65535", t, p)
	}
	return uint16(n), true, nil
}

func printHuman(w io.Writer, o checkOutput, d hostpolicy.Decision) {
	fmt.Fprintf(w, "host:     %s\nport:     %d\nprotocol: %s\n", o.Host, o.Port, o.Protocol)
	for _, s := range o.Steps {
		if s.Detail != "" {
			fmt.Fprintf(w, "  %-12s %-6s %s\n", s.Step, s.Result, s.Detail)
		} else {
			fmt.Fprintf(w, "  %-12s %s\n", s.Step, s.Result)
		}
	}
	if len(o.Resolved) > 0 {
		fmt.Fprintf(w, "resolved: %s\n", strings.Join(o.Resolved, ", "))
	}
	switch d.Verdict {
	case hostpolicy.Allow:
		fmt.Fprintf(w, "decision: allow (source %s", o.Source)
		if o.Pattern != "" {
			fmt.Fprintf(w, ", pattern %s", o.Pattern)
		}
		fmt.Fprintln(w, ")")
	default:
		if o.Level != "" {
			fmt.Fprintf(w, "decision: %s (reason %s, source %s, level %s): %s\n", o.Decision, o.Reason, o.Source, o.Level, d.Message())
		} else {
			fmt.Fprintf(w, "decision: %s (reason %s, source %s): %s\n", o.Decision, o.Reason, o.Source, d.Message())
		}
	}
	for _, n := range o.Notes {
		fmt.Fprintf(w, "note:     %s\n", n)
	}
}

// readScopeFile reads a narrower network policy: the JSON object of POST
// /v1/executions' "network" key. Unknown keys are errors.
func readScopeFile(path string) (hostpolicy.ScopeSpec, error) {
	var spec hostpolicy.ScopeSpec
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return spec, fmt.Errorf("%s: cannot read: %v", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return spec, fmt.Errorf(`%s: want a JSON object {"allow":[...],"deny":[...],"mode":"limited"}: %v`, path, err)
	}
	return spec, nil
}

// printErrors prints every error joined in err on its own line.
func printErrors(w io.Writer, title string, err error) {
	fmt.Fprintln(w, title+":")
	for _, e := range flatten(err) {
		fmt.Fprintf(w, "  %v\n", e)
	}
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// reorderFlags moves flags after the positional target in front of it, so
// `check HOST --json` works like `check --json HOST`.
func reorderFlags(args []string, takesValue map[string]bool) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && takesValue[name] && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(append(flags, "--"), pos...)
}

// blockCause is d's cause when blocked, "" when allowed.
func blockCause(d hostpolicy.Decision) string {
	if d.Allowed() {
		return ""
	}
	return string(d.BlockCause())
}

// clientScope is the narrower policy of the configured proxy client name
// (nil when it narrows nothing).
func clientScope(cfg *config.Config, name string) (*hostpolicy.Scope, error) {
	for _, c := range cfg.ProxyAuth.Clients {
		if c.Name == name {
			return c.Scope()
		}
	}
	return nil, fmt.Errorf("%q is not a [[proxy_auth.clients]] name of this configuration", name)
}
