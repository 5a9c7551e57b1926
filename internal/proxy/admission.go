package proxy

import (
	"net/http"
	"strings"

	"github.com/netproxy/netproxy/hostpolicy"
)

// The admission stage: the last stage of the pipeline on the data path
// (hostpolicy.StageAdmission), run on an allowed outer request. Its own
// stages run in this order; each may mark the decision intercepted or
// block it, and says why with a typed hostpolicy.Cause. Adding one is an
// entry here and its case in Admit (a switch, not function values, so the
// decision stays on the stack).
type admissionStage string

const (
	admitCredentials  admissionStage = "credential_interception"
	admitInterception admissionStage = "mitm"
)

// (netproxy's own listeners are the pipeline's own_listener stage, so that
// replay judges them too; the dialer refuses the bound addresses at dial.)
var admission = [...]admissionStage{admitCredentials, admitInterception}

// Admit is hostpolicy.Admitter: the admission stages over an allowed
// decision.
func (c *Core) Admit(req hostpolicy.Request, d hostpolicy.Decision) hostpolicy.Decision {
	for _, st := range admission {
		if !d.Allowed() {
			break
		}
		switch st {
		case admitCredentials:
			c.admitCredential(req, &d)
		case admitInterception:
			c.admitMITM(&d)
		default:
			panic("proxy: admission stage " + string(st) + " has no function")
		}
	}
	return d
}

// admitCredential intercepts an allowed CONNECT, or SOCKS5 to port 443,
// toward a credential's host, whatever the mode: the broker must see the
// request to inject the secret. Without an interceptor nothing changes
// (config refuses credentials without [mitm]).
func (c *Core) admitCredential(req hostpolicy.Request, d *hostpolicy.Decision) {
	if d.Intercept || c.Credentials == nil || c.MITM == nil || c.Credentials.Len() == 0 {
		return
	}
	switch {
	case req.Protocol == hostpolicy.ProtoHTTPS && strings.EqualFold(req.Method, http.MethodConnect):
	case req.Protocol == hostpolicy.ProtoSOCKS5 && d.Port == 443:
	default:
		return
	}
	if !c.Credentials.Intercepts(d.Host) {
		return
	}
	d.Intercept, d.Cause = true, hostpolicy.CauseCredential
	d.AddStep(hostpolicy.Step{Step: hostpolicy.StepMode, Result: hostpolicy.ResultPass, Detail: "credential interception"})
}

// admitMITM checks the interception hostpolicy admitted (Intercept on an
// allowed limited-mode CONNECT, keeping the decision's own source):
// without an interceptor it fails closed with mitm_required.
func (c *Core) admitMITM(d *hostpolicy.Decision) {
	if !d.Intercept || c.MITM != nil {
		return
	}
	d.Verdict, d.Reason, d.Source, d.Intercept = hostpolicy.Deny, hostpolicy.ReasonMITMRequired, hostpolicy.SourceModeGuard, false
	d.Cause = hostpolicy.CauseNoInterceptor
	d.AddStep(hostpolicy.Step{Step: hostpolicy.StepMode, Result: hostpolicy.ResultBlock, Detail: "limited: no interceptor"})
}
