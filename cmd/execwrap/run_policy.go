package main

import (
	"encoding/json"
	"fmt"
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
	res, err := execcore.Evaluate(in)
	if err != nil {
		return nil, err
	}
	kind, err := sandbox.ParseKind(string(in.Sandbox))
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
		Policy:             in.ApprovalPolicy,
		Kind:               kind,
		SandboxPermissions: string(res.Envelope.EffectivePermissions),
		Justification:      res.Envelope.Justification,
		Env:                res.Envelope.Env,
		TimeoutMS:          res.Envelope.TimeoutMS,
	}, nil
}
