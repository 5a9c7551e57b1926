package hostpolicy

// Client identity (SPEC §4.4) is checked on the data path before any
// decision (internal/proxy/proxyauth.go); the block it makes and the
// narrower policy of an authenticated client are named here.

// ReasonProxyAuthRequired: the client sent a wrong proxy secret, or none
// while proxy_auth.required is true. Its source is SourceProxyState (the
// block is about who asks, not the target; no reviewer may lift it); the
// client gets 407 with a Basic challenge (SOCKS5: status 1).
const ReasonProxyAuthRequired Reason = "proxy_auth_required"

// The causes of a proxy_auth_required block.
const (
	CauseProxyAuthMissing Cause = "credentials_missing" // none sent, required = true
	CauseProxyAuthFailed  Cause = "credentials_invalid" // wrong secret, unknown name, or malformed
)

// ProxyAuthMessage is what a client is told when it must authenticate.
const ProxyAuthMessage = "Proxy authentication required."

// LevelClient is the level of an authenticated client's narrower policy
// ([[proxy_auth.clients]] allow/deny/mode): a scope like a session's.
const LevelClient = "client"
