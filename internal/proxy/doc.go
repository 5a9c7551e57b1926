// Package proxy owns netproxy's data path. Its files, in the order a
// connection meets them:
//
//   - accept.go: the Gate admits every accepted connection (connection
//     limit, attribution frame); the Tracker holds the admitted ones.
//   - conn.go, head.go, connect.go: the HTTP/CONNECT front end (our own
//     request loop and head parser); socks.go the SOCKS5 one.
//   - core.go: what both share (Core) and the one call into the decision
//     pipeline (Pipeline.Run); admission.go the pipeline's last stage on
//     the data path (credential interception, MITM, own listeners).
//   - clientgone.go: a slow decision (a pending review) is cancelled when
//     the client goes away.
//   - block.go: every answer the proxy makes itself (blocks, 4xx, 502).
//   - dialer.go, self.go: the one pinned dialer; netproxy's own listen
//     addresses and Via token, never dialed.
//   - forward.go, upstream.go, peek.go: plain-HTTP forwarding over one
//     pool of upstream keep-alive connections.
//   - tunnel.go, tunnelpark.go: byte-copying tunnels, and the parker that
//     holds their quiet directions without a goroutine.
//   - mitm.go, credentials.go: intercepted tunnels (inner requests
//     re-checked through the pipeline) and the credential broker's hooks.
//   - access.go: the access record (connection_end) that ends every
//     allowed request and tunnel, with its bytes, duration and close reason.
//   - recheck.go: the open connections' targets, re-checked on every
//     policy change, kill switch and execution revocation (SPEC §3.9).
//
// Every request goes through the one decision pipeline (hostpolicy) before
// any upstream byte is sent; this package must never resolve or dial a
// target the pipeline has not allowed, never dial one of netproxy's own
// listeners, never forward Proxy-Authorization, and never log a token, a
// query string or a header value.
package proxy
