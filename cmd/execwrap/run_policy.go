package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/netproxy/netproxy/execcore"
	"github.com/netproxy/netproxy/execcore/shellparse"
	"github.com/netproxy/netproxy/sandbox"
)

// evaluateInvocation runs execcore on the shared check flags and keeps what
// `run` needs: handler argv, cwd, environment, approval identity and the
// requirement.
func evaluateInvocation(cf *checkFlags, ro runOptions, stdin io.Reader) (*invocation, error) {
	in, err := cf.input(stdin)
	if err != nil {
		return nil, err
	}
	in.SessionID, in.EnvironmentID = ro.session, ro.envID
	res, err := execcore.Evaluate(in)
	if err != nil {
		return nil, err
	}
	kind, err := sandbox.ParseKind(string(in.Sandbox))
	if err != nil {
		return nil, err
	}
	req := res.Requirement
	rj, err := json.Marshal(toRequirementJSON(res.Requirement))
	if err != nil {
		return nil, err
	}
	if len(res.Envelope.Argv) == 0 {
		return nil, fmt.Errorf("execcore produced an empty handler argv")
	}
	argv := res.Envelope.Argv
	if shell, ok := res.Trust.Shell(argv[0]); ok && !strings.Contains(argv[0], "/") {
		// A bare shell name runs from execwrap's own trusted PATH, never
		// from the caller's (a workspace bin/ first on PATH must not turn
		// a wrapper's shell into a workspace program).
		abs, err := resolveTrustedShell(string(shell), res.Trust)
		if err != nil {
			return nil, err
		}
		argv = append([]string{abs}, argv[1:]...)
	}
	env := res.Envelope.Env
	if req.Kind == execcore.Skip && req.BypassSandbox {
		// Outside the sandbox a bare program name is looked up on PATH:
		// a workspace folder (or ".") on it would run a program the
		// command itself may have written, so only fixed folders stay.
		env = withFixedPATH(env, res.Trust)
	}
	return &invocation{
		HandlerArgv:        argv,
		Cwd:                res.Envelope.Cwd,
		BaseCwd:            in.BaseCwd,
		ApprovalIdentity:   res.Identity.Command,
		ApprovalShell:      res.Identity.Shell,
		Requirement:        req,
		ExecSource:         execSource(res.Evaluation),
		RequirementJSON:    rj,
		Policy:             in.ApprovalPolicy,
		Kind:               kind,
		SandboxPermissions: string(res.Envelope.EffectivePermissions),
		Justification:      res.Envelope.Justification,
		ApprovalReason:     approvalReason(req, res.Evaluation, in.ApprovalPolicy.String(), string(res.Envelope.EffectivePermissions)),
		Env:                env,
		TimeoutMS:          res.Envelope.TimeoutMS,
	}, nil
}

// resolveTrustedShell finds a shell in the system directories, in order,
// skipping any inside a writable root: the first regular, executable file
// wins. Symbolic links are followed (/bin/sh → dash); the name itself is
// what was trusted.
func resolveTrustedShell(name string, tr shellparse.Trust) (string, error) {
	for _, dir := range shellparse.SystemDirs() {
		p := dir + "/" + name
		if !tr.SystemPath(p) {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && unix.Access(p, unix.X_OK) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s in the trusted system directories (%s)", name, strings.Join(shellparse.SystemDirs(), ":"))
}

// withFixedPATH returns env with PATH narrowed to shellparse's fixed
// folders (a copy; env itself is not changed).
func withFixedPATH(env []string, tr shellparse.Trust) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			kv = "PATH=" + tr.FixedPATH(v)
		}
		out[i] = kv
	}
	return out
}
