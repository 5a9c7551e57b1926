package webui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

const (
	// SessionCookie holds the page's login: an expiry and an HMAC keyed by
	// the admin token, never the token itself.
	SessionCookie = "netproxy_admin_session"
	// CSRFHeader must carry the session's CSRF token on every
	// cookie-authenticated request that changes state.
	CSRFHeader = "X-CSRF-Token"
	// DefaultSessionTTL is how long a page login lasts.
	DefaultSessionTTL = 12 * time.Hour
	// maxLoginBody bounds the login form.
	maxLoginBody = 4096
)

// AuthError is an authentication or CSRF failure with its HTTP status.
type AuthError struct {
	Status int // 401 or 403
	Msg    string
}

func (e *AuthError) Error() string { return e.Msg }

var (
	errNoCredentials = &AuthError{http.StatusUnauthorized, "admin token required: send Authorization: Bearer <token> or sign in on the approvals page"}
	errBadBearer     = &AuthError{http.StatusUnauthorized, "admin token rejected"}
	errBadSession    = &AuthError{http.StatusUnauthorized, "session expired or invalid: sign in again"}
	errNoToken       = &AuthError{http.StatusUnauthorized, "no admin token is configured: the admin API is closed"}
	errCrossOrigin   = &AuthError{http.StatusForbidden, "cross-origin request refused"}
	errCSRF          = &AuthError{http.StatusForbidden, "missing or wrong " + CSRFHeader + " header: reload the page"}
)

// Auth checks admin credentials: the bearer token of admin.token_env, or the
// session cookie the page gets by signing in with that token. Cookie-based
// requests that change state must also pass the CSRF checks.
type Auth struct {
	tokenSum [32]byte // sha256 of the token: compared in constant time, length-blind
	hasToken bool
	key      []byte // HMAC key for cookies and CSRF tokens, derived from the token
	ttl      time.Duration
	now      func() time.Time
}

// NewAuth returns an Auth for token. An empty token refuses every request
// (fail closed). ttl <= 0 takes DefaultSessionTTL; now nil takes time.Now.
func NewAuth(token string, ttl time.Duration, now func() time.Time) *Auth {
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	if now == nil {
		now = time.Now
	}
	a := &Auth{ttl: ttl, now: now, hasToken: token != ""}
	a.tokenSum = sha256.Sum256([]byte(token))
	k := hmac.New(sha256.New, []byte(token))
	k.Write([]byte("netproxy webui session key v1"))
	a.key = k.Sum(nil)
	return a
}

// GenerateToken returns a fresh random admin token (256 bits, URL-safe).
func GenerateToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// checkToken compares a presented token with the configured one in
// constant time without leaking its length.
func (a *Auth) checkToken(presented string) bool {
	if !a.hasToken {
		return false
	}
	sum := sha256.Sum256([]byte(presented))
	return subtle.ConstantTimeCompare(sum[:], a.tokenSum[:]) == 1
}

func (a *Auth) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newSession returns a cookie value "v1.<expiry unix>.<nonce>.<mac>".
func (a *Auth) newSession() (string, time.Time, error) {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return "", time.Time{}, err
	}
	exp := a.now().Add(a.ttl).Truncate(time.Second)
	e := strconv.FormatInt(exp.Unix(), 10)
	n := base64.RawURLEncoding.EncodeToString(nonce)
	return "v1." + e + "." + n + "." + a.mac("session", e, n), exp, nil
}

// validSession reports whether v is an unexpired cookie value this Auth made.
func (a *Auth) validSession(v string) bool {
	if !a.hasToken {
		return false
	}
	parts := strings.Split(v, ".")
	if len(parts) != 4 || parts[0] != "v1" {
		return false
	}
	want := a.mac("session", parts[1], parts[2])
	if subtle.ConstantTimeCompare([]byte(want), []byte(parts[3])) != 1 {
		return false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return false
	}
	return a.now().Before(time.Unix(exp, 0))
}

// CSRFToken is the token a page holding session cookie value v must echo
// in CSRFHeader. Only a same-origin script can learn it (from /api/session).
func (a *Auth) CSRFToken(sessionValue string) string { return a.mac("csrf", sessionValue) }

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// sameOrigin reports whether the request's Origin (when sent) and
// Sec-Fetch-Site (when sent) say it comes from this listener's own page.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if origin == "null" {
		// The page's Referrer-Policy: no-referrer makes a browser send
		// "Origin: null" on its own form POSTs; a sandboxed frame or a
		// data: URL elsewhere sends it too, so only Sec-Fetch-Site
		// same-origin admits it (a browser without it is refused).
		return r.Header.Get("Sec-Fetch-Site") == "same-origin"
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return u.Scheme == scheme && strings.EqualFold(u.Host, r.Host)
}

// Authorize returns nil when r carries valid credentials (and, for a
// cookie-authenticated state change, passes the CSRF checks), else an
// *AuthError. A bearer header, when present, is the only credential looked
// at: a wrong one is refused even if a valid cookie is also sent.
func (a *Auth) Authorize(r *http.Request) error {
	if !a.hasToken {
		return errNoToken
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || !a.checkToken(strings.TrimSpace(tok)) {
			return errBadBearer
		}
		return nil
	}
	return a.authorizeCookie(r)
}

// authorizeCookie checks the session cookie and, for a state change, the
// Origin / Sec-Fetch-Site and CSRF header.
func (a *Auth) authorizeCookie(r *http.Request) error {
	if !a.hasToken {
		return errNoToken
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return errNoCredentials
	}
	if !a.validSession(c.Value) {
		return errBadSession
	}
	if safeMethod(r.Method) {
		return nil
	}
	if !sameOrigin(r) {
		return errCrossOrigin
	}
	want := a.CSRFToken(c.Value)
	got := r.Header.Get(CSRFHeader)
	if subtle.ConstantTimeCompare([]byte(want), []byte(got)) != 1 {
		return errCSRF
	}
	return nil
}

// CookieAuth is the admin.SessionAuth for requests without an
// Authorization header: 0 to let r through, else the status and message.
func (a *Auth) CookieAuth(r *http.Request) (status int, msg string) {
	if r.Header.Get("Authorization") != "" {
		return http.StatusUnauthorized, errBadBearer.Msg
	}
	if err := a.authorizeCookie(r); err != nil {
		var ae *AuthError
		if errors.As(err, &ae) {
			return ae.Status, ae.Msg
		}
		return http.StatusUnauthorized, err.Error()
	}
	return 0, ""
}

// Require wraps h so that it runs only for authorized requests; others get
// a JSON error with 401 (with WWW-Authenticate) or 403.
func (a *Auth) Require(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := a.Authorize(r); err != nil {
			WriteAuthError(w, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// WriteAuthError answers an Authorize failure.
func WriteAuthError(w http.ResponseWriter, err error) {
	var ae *AuthError
	if !errors.As(err, &ae) {
		ae = errNoCredentials
	}
	if ae.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="netproxy admin"`)
	}
	writeJSON(w, ae.Status, map[string]string{"error": ae.Msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (a *Auth) setSessionCookie(w http.ResponseWriter, r *http.Request) error {
	v, exp, err := a.newSession()
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{
		Name:     SessionCookie,
		Value:    v,
		Path:     "/",
		Expires:  exp,
		MaxAge:   int(a.ttl / time.Second),
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
	return nil
}

// LoginHandler signs the page in: POST /login with form field "token"
// (from the page's sign-in form), or GET /login?token=… (the URL `netproxy
// serve` prints). On success it sets the session cookie and redirects to /
// so the token never stays in the address bar; on failure it answers 401.
func (a *Auth) LoginHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer")
		var presented string
		switch r.Method {
		case http.MethodGet:
			presented = r.URL.Query().Get("token")
		case http.MethodPost:
			if !sameOrigin(r) {
				WriteAuthError(w, errCrossOrigin)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
			if err := r.ParseForm(); err != nil {
				http.Error(w, "bad login form", http.StatusBadRequest)
				return
			}
			presented = r.PostForm.Get("token")
		default:
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if !a.checkToken(strings.TrimSpace(presented)) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(loginFailedHTML))
			return
		}
		if err := a.setSessionCookie(w, r); err != nil {
			http.Error(w, "cannot create a session", http.StatusInternalServerError)
			return
		}
		http.Redirect(w, r, "/", http.StatusSeeOther)
	})
}

// LogoutHandler clears the session cookie (POST, CSRF-checked).
func (a *Auth) LogoutHandler() http.Handler {
	return a.Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		w.WriteHeader(http.StatusNoContent)
	}))
}

// SessionHandler answers GET /api/session (behind Require) with the CSRF
// token the page must send on state changes. A bearer client gets none: it
// needs no CSRF protection.
func (a *Auth) SessionHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp := map[string]any{"authenticated": true}
		if c, err := r.Cookie(SessionCookie); err == nil && r.Header.Get("Authorization") == "" {
			resp["csrf_token"] = a.CSRFToken(c.Value)
			resp["via"] = "cookie"
		} else {
			resp["via"] = "bearer"
		}
		writeJSON(w, http.StatusOK, resp)
	})
}

const loginFailedHTML = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>netproxy: token rejected</title></head>
<body style="font-family:system-ui,sans-serif;max-width:40rem;margin:4rem auto">
<h1>Admin token rejected</h1>
<p>Use the token that <code>netproxy serve</code> printed at start, or the value of the variable named by <code>admin.token_env</code> (default <code>NETPROXY_ADMIN_TOKEN</code>).</p>
<p><a href="/">Back to the approvals page</a></p></body></html>
`
