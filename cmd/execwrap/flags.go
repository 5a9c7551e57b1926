package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/netproxy/netproxy/execcore"
	"github.com/netproxy/netproxy/execcore/envpolicy"
	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/execcore/heuristics"
	"github.com/netproxy/netproxy/internal/config"
)

// checkFlags are the flags shared by `execwrap check` and `execwrap run`
// (SPEC §7.6): the command (argv or tool call) and its gating context.
type checkFlags struct {
	JSON               bool
	Rules              []string
	ApprovalPolicy     string
	Sandbox            string
	SandboxPermissions string
	Cwd                string
	Shell              string
	Tool               string
	Args               string
	PrefixRule         string
	NoLoginShell       bool
	// WritableRoots are extra writable roots (made absolute by input):
	// `run` gives them to the sandbox, and both commands stop trusting
	// system paths inside them (SPEC §6.2).
	WritableRoots []string

	EnvInherit     string
	EnvExclude     []string
	EnvSet         []string
	EnvIncludeOnly []string
	EnvKeepSecrets bool

	// Argv is everything after `--` (or the first non-flag argument).
	Argv []string
}

type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// registerCheckFlags adds the shared flags to fs; a caller may add its own
// flags to the same set before parsing.
func registerCheckFlags(fs *flag.FlagSet) *checkFlags {
	f := &checkFlags{}
	fs.BoolVar(&f.JSON, "json", false, "print the result as JSON")
	fs.Var((*repeated)(&f.Rules), "rules", "folder of *.rules files (repeatable); $NETPROXY_HOME/rules is always read")
	fs.StringVar(&f.ApprovalPolicy, "approval-policy", "on-request", "never | on-request | untrusted | granular[:sandbox_approval,rules]")
	fs.StringVar(&f.Sandbox, "sandbox", "workspace-write", "read-only | workspace-write | danger-full-access | external")
	fs.StringVar(&f.SandboxPermissions, "sandbox-permissions", "", "use_default | require_escalated | with_additional_permissions (default for a tool call that does not set sandbox_permissions)")
	fs.StringVar(&f.Cwd, "cwd", "", "base working directory (default: the current directory)")
	fs.StringVar(&f.Shell, "shell", "", "shell for tool calls (default: the user's login shell)")
	fs.StringVar(&f.Tool, "tool", "", "shell_command | exec_command")
	fs.StringVar(&f.Args, "args", "", "the tool call's arguments JSON, or - to read them from stdin")
	fs.StringVar(&f.PrefixRule, "prefix-rule", "", "requested amendment for a plain argv, as a JSON array of strings")
	fs.Var((*repeated)(&f.WritableRoots), "writable-root", "extra writable root (repeatable)")
	fs.BoolVar(&f.NoLoginShell, "no-login-shell", false, "disallow login shells for tool calls (an absent login field then means false; login: true is an error)")
	fs.StringVar(&f.EnvInherit, "env-inherit", "all", "environment start set: all | core | none")
	fs.Var((*repeated)(&f.EnvExclude), "env-exclude", "drop variables matching this case-insensitive * ? pattern (repeatable)")
	fs.Var((*repeated)(&f.EnvSet), "env-set", "set NAME=VALUE in the command's environment (repeatable)")
	fs.Var((*repeated)(&f.EnvIncludeOnly), "env-include-only", "keep only variables matching this pattern (repeatable)")
	fs.BoolVar(&f.EnvKeepSecrets, "env-keep-secrets", false, "do not drop *KEY*, *SECRET*, *TOKEN* variables")
	return f
}

// parseCheckFlags parses args (flags, then `-- ARGV...`) with the shared
// flag set only.
func parseCheckFlags(name string, args []string, stderr io.Writer) (*checkFlags, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := registerCheckFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	f.Argv = fs.Args()
	return f, nil
}

// usageError marks errors of the command line itself.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// rulesDirs lists the folders rules are read from: $NETPROXY_HOME/rules
// first, then every --rules folder in order. An explicit --rules folder
// must exist (a typo must not silently drop rules).
func (f *checkFlags) rulesDirs() ([]string, error) {
	dirs := []string{filepath.Join(config.HomeDir(), "rules")}
	for _, d := range f.Rules {
		st, err := os.Stat(d)
		if err != nil {
			return nil, fmt.Errorf("--rules %s: %w", d, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("--rules %s: not a directory", d)
		}
		dirs = append(dirs, d)
	}
	return dirs, nil
}

// loadPolicy loads every rules file; any error fails the whole load.
func (f *checkFlags) loadPolicy() (*execpolicy.Policy, error) {
	dirs, err := f.rulesDirs()
	if err != nil {
		return nil, err
	}
	return execpolicy.LoadDirs(dirs...)
}

// input builds the execcore input: validates every flag, reads --args -
// from stdin, loads the rules.
func (f *checkFlags) input(stdin io.Reader) (execcore.Input, error) {
	var in execcore.Input
	ap, err := heuristics.ParseApprovalPolicy(f.ApprovalPolicy)
	if err != nil {
		return in, &usageError{fmt.Errorf("--approval-policy: %w", err)}
	}
	sb, err := heuristics.ParseSandboxMode(f.Sandbox)
	if err != nil {
		return in, &usageError{fmt.Errorf("--sandbox: %w", err)}
	}
	in.ApprovalPolicy, in.Sandbox = ap, sb
	if f.SandboxPermissions != "" {
		sp, err := heuristics.ParseSandboxPermissions(f.SandboxPermissions)
		if err != nil {
			return in, &usageError{fmt.Errorf("--sandbox-permissions: %w", err)}
		}
		in.SandboxPermissions = sp
	}
	cwd := f.Cwd
	if cwd == "" {
		if cwd, err = os.Getwd(); err != nil {
			return in, fmt.Errorf("current directory: %w", err)
		}
	}
	if cwd, err = filepath.Abs(cwd); err != nil {
		return in, &usageError{fmt.Errorf("--cwd: %w", err)}
	}
	in.BaseCwd = cwd
	for i, w := range f.WritableRoots {
		a, err := filepath.Abs(w)
		if err != nil {
			return in, &usageError{fmt.Errorf("--writable-root %q: %v", w, err)}
		}
		f.WritableRoots[i] = a
	}
	in.WritableRoots = f.WritableRoots
	in.AllowLoginShell = !f.NoLoginShell
	switch {
	case f.Tool != "" && len(f.Argv) > 0:
		return in, &usageError{errors.New("give either --tool/--args or -- ARGV, not both")}
	case f.Tool != "":
		if f.Args == "" {
			return in, &usageError{errors.New("--tool needs --args JSON (or --args - for stdin)")}
		}
		args := []byte(f.Args)
		if f.Args == "-" {
			if args, err = io.ReadAll(io.LimitReader(stdin, 1<<20+1)); err != nil {
				return in, fmt.Errorf("read --args from stdin: %w", err)
			}
		}
		in.Tool, in.Args = f.Tool, args
		in.Shell = f.Shell
		if in.Shell == "" {
			in.Shell = userShell()
		}
	case f.Args != "":
		return in, &usageError{errors.New("--args needs --tool shell_command|exec_command")}
	default:
		if len(f.Argv) == 0 {
			return in, &usageError{errors.New("no command: pass -- ARGV... or --tool T --args JSON")}
		}
		in.Argv = f.Argv
	}
	if f.PrefixRule != "" {
		if in.Tool != "" {
			return in, &usageError{errors.New("--prefix-rule applies to a plain argv; a tool call sets prefix_rule in its arguments")}
		}
		if err := json.Unmarshal([]byte(f.PrefixRule), &in.PrefixRule); err != nil {
			return in, &usageError{fmt.Errorf("--prefix-rule: want a JSON array of strings: %w", err)}
		}
	}
	inherit, err := envpolicy.ParseInherit(f.EnvInherit)
	if err != nil {
		return in, &usageError{fmt.Errorf("--env-inherit: %w", err)}
	}
	in.EnvPolicy = envpolicy.Policy{
		Inherit: inherit, IgnoreDefaultExcludes: f.EnvKeepSecrets,
		Exclude: f.EnvExclude, IncludeOnly: f.EnvIncludeOnly,
	}
	if len(f.EnvSet) > 0 {
		in.EnvPolicy.Set = map[string]string{}
		for _, kv := range f.EnvSet {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return in, &usageError{fmt.Errorf("--env-set %q: want NAME=VALUE", kv)}
			}
			in.EnvPolicy.Set[k] = v
		}
	}
	if err := in.EnvPolicy.Validate(); err != nil {
		return in, &usageError{err}
	}
	in.ParentEnv = os.Environ()
	pol, err := f.loadPolicy()
	if err != nil {
		return in, err
	}
	in.Policy = pol
	return in, nil
}

// evaluate parses nothing more: it builds the input and runs execcore.
func (f *checkFlags) evaluate(stdin io.Reader) (execcore.Result, error) {
	in, err := f.input(stdin)
	if err != nil {
		return execcore.Result{}, err
	}
	return execcore.Evaluate(in)
}

// userShell is the login shell of the current user: the passwd entry, then
// $SHELL, then /bin/sh.
func userShell() string {
	if data, err := os.ReadFile("/etc/passwd"); err == nil {
		uid := fmt.Sprint(os.Getuid())
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Split(line, ":")
			if len(fields) >= 7 && fields[2] == uid && fields[6] != "" {
				return fields[6]
			}
		}
	}
	if s := os.Getenv("SHELL"); s != "" {
		return s
	}
	return "/bin/sh"
}
