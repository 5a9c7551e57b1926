// Package webui owns the reviewer-facing side of the admin listener (SPEC
// §7.3): the self-contained approvals page (assets embedded, nothing from a
// CDN), the cookie login that keeps the admin bearer token out of JavaScript,
// CSRF protection for cookie-authenticated state changes, the server-sent
// events hub behind GET /api/events, GET /api/executions, and the small admin
// API client and SSE reader used by `netproxy approvals`.
//
// It must never decide an approval itself (approvalsvc does), never log or
// echo a token, a query string or a header value, and never serve API data to
// a request that carries neither the bearer token nor a valid session cookie.
package webui
