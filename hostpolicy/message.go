package hostpolicy

// DisabledMessage is what a client is told while network.enabled is false.
const DisabledMessage = "network proxy is disabled"

// Message is the client-facing text of a blocked decision (SPEC §3.7).
func (d Decision) Message() string {
	switch d.Reason {
	case ReasonNotAllowed:
		return "Domain not in allowlist."
	case ReasonNotAllowedLocal:
		if d.Cause == CauseDNSError || d.Cause == CauseDNSTimeout {
			return "Host name could not be resolved."
		}
		return "Sandbox policy blocks local/private network addresses."
	case ReasonDenied:
		return "Domain denied by the sandbox policy."
	case ReasonMethodNotAllowed:
		return "Method not allowed in limited mode."
	case ReasonMITMRequired:
		return "MITM required for limited HTTPS."
	case ReasonBudgetExceeded:
		return BudgetMessage
	case ReasonProxyAuthRequired:
		return ProxyAuthMessage
	case ReasonRequestDenied:
		if d.RuleMessage != "" {
			return d.RuleMessage
		}
		if d.Cause == CausePathNotNormal {
			return "Request path does not normalise; request rules cannot judge it."
		}
		return "Request blocked by a request rule."
	case ReasonCredentialMisuse:
		return "Credential placeholder sent to a host or from an execution it does not belong to."
	case ReasonProxyDisabled:
		// Never a 403 body: it is the body of the 503 a disabled proxy
		// answers (SPEC §3.7; the reference's text, §4.3).
		return DisabledMessage
	case ReasonPolicyDenied:
		switch d.Level {
		case LevelExecution:
			return "Blocked by this execution's network policy."
		case LevelSession:
			return "Blocked by this session's network policy."
		case LevelClient:
			return "Blocked by this client's network policy."
		}
	}
	return "Request blocked by network policy."
}

// XProxyError is the x-proxy-error header value of a blocked decision
// (SPEC §3.7).
func (d Decision) XProxyError() string {
	switch d.Reason {
	case ReasonNotAllowed, ReasonNotAllowedLocal:
		return "blocked-by-allowlist"
	case ReasonDenied:
		return "blocked-by-denylist"
	case ReasonMethodNotAllowed:
		return "blocked-by-method-policy"
	case ReasonMITMRequired:
		return "blocked-by-mitm-required"
	case ReasonMITMHookDenied:
		return "blocked-by-mitm-hook"
	case ReasonBudgetExceeded:
		return "blocked-by-budget"
	case ReasonRequestDenied:
		return "blocked-by-request-rule"
	case ReasonSNIMismatch:
		return "blocked-by-tls-name"
	}
	return "blocked-by-policy"
}
