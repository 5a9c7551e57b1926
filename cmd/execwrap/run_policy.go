package main

import (
	"encoding/json"
	"fmt"
	"github.com/netproxy/netproxy/execcore/approvalpolicy"
	"io"

	"github.com/netproxy/netproxy/execcore"
	"github.com/netproxy/netproxy/sandbox"
	"github.com/netproxy/netproxy/sandbox/orchestrator"
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
	res, err := evaluateExec(in)
	if err != nil {
		return nil, err
	}
	kind, err := sandbox.ParseKind(cf.Sandbox)
	if err != nil {
		return nil, err
	}
	pol, err := approvalpolicy.Parse(cf.ApprovalPolicy)
	if err != nil {
		return nil, err
	}
	req := orchestrator.Requirement{
		Kind:              string(res.Requirement.Kind),
		BypassSandbox:     res.Requirement.BypassSandbox,
		Reason:            res.Requirement.Reason,
		ProposedAmendment: res.Requirement.ProposedAmendment,
	}
	rj, err := json.Marshal(toRequirementJSON(res.Requirement))
	if err != nil {
		return nil, err
	}
	if len(res.Envelope.Argv) == 0 {
		return nil, fmt.Errorf("execcore produced an empty handler argv")
	}
	return &invocation{
		HandlerArgv:        res.Envelope.Argv,
		Cwd:                res.Envelope.Cwd,
		ApprovalIdentity:   res.Identity.Command,
		Requirement:        req,
		ExecSource:         execSource(res.Evaluation),
		RequirementJSON:    rj,
		Policy:             pol,
		Kind:               kind,
		SandboxPermissions: string(res.Envelope.EffectivePermissions),
		Justification:      res.Envelope.Justification,
		Env:                res.Envelope.Env,
		TimeoutMS:          res.Envelope.TimeoutMS,
	}, nil
}

// evaluateExec is execcore.Evaluate (kept separate so the call site reads
// as the one place run consults the exec policy).
func evaluateExec(in execcore.Input) (execcore.Result, error) { return execcore.Evaluate(in) }
