package webui

import (
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/netproxy/netproxy/internal/admin"
)

//go:embed assets
var assetFS embed.FS

// contentSecurityPolicy allows only this listener's own script, style and
// API: no inline script, no CDN, no framing (the page has decision buttons).
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Execution is an active execution as the page shows it.
type Execution struct {
	ID            string    `json:"execution_id"`
	SessionID     string    `json:"session_id"`
	EnvironmentID string    `json:"environment_id"`
	TurnID        string    `json:"turn_id,omitempty"`
	Command       []string  `json:"command"`
	Cwd           string    `json:"cwd,omitempty"`
	Started       time.Time `json:"started_at"`
}

// ExecutionLister lists the active executions (the attribution registry,
// adapted by the server wiring).
type ExecutionLister interface {
	ActiveExecutions() []Execution
}

// ExecutionListerFunc adapts a function to ExecutionLister.
type ExecutionListerFunc func() []Execution

func (f ExecutionListerFunc) ActiveExecutions() []Execution { return f() }

// Options configures the UI.
type Options struct {
	Auth       *Auth           // required: an Auth for the admin token
	Hub        *Hub            // required: the event hub behind /api/events
	Executions ExecutionLister // nil: no execution registry, the list is empty
	Logger     *slog.Logger
}

// UI is the approvals page and its routes.
type UI struct {
	opts   Options
	assets http.Handler
	index  []byte
}

// New returns the UI. It panics only on a build defect (missing embedded
// assets), which the package tests catch.
func New(opts Options) *UI {
	if opts.Auth == nil || opts.Hub == nil {
		panic("webui.New: Auth and Hub are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	sub, err := fs.Sub(assetFS, "assets")
	if err != nil {
		panic("webui: embedded assets missing: " + err.Error())
	}
	index, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		panic("webui: embedded index.html missing: " + err.Error())
	}
	return &UI{opts: opts, assets: http.StripPrefix("/assets/", http.FileServerFS(sub)), index: index}
}

// Mount registers the page, its assets, the login routes, /api/session,
// /api/events and /api/executions on the admin server, and lets the
// session cookie into its /api/* routes. The admin server and the UI's
// Auth must be built from the same token.
func (u *UI) Mount(m *admin.Server) {
	m.SetSessionAuth(u.opts.Auth.CookieAuth)
	m.Handle("GET /{$}", u.PageHandler())
	m.Handle("GET /assets/", u.AssetsHandler())
	m.Handle("/login", u.opts.Auth.LoginHandler())
	m.Handle("/logout", u.opts.Auth.LogoutHandler())
	m.HandleAPI("GET /api/session", u.opts.Auth.SessionHandler())
	m.HandleAPI("GET /api/events", u.opts.Hub)
	m.HandleAPI("GET /api/executions", u.ExecutionsHandler())
}

func setPageHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// PageHandler serves the approvals page. The HTML holds no data, so it is
// served without credentials; the script signs in and loads the lists.
func (u *UI) PageHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		setPageHeaders(w.Header())
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(u.index)
	})
}

// AssetsHandler serves the embedded script and stylesheet under /assets/.
func (u *UI) AssetsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setPageHeaders(w.Header())
		w.Header().Set("Cache-Control", "no-cache")
		u.assets.ServeHTTP(w, r)
	})
}

// ExecutionsHandler answers GET /api/executions with
// {"executions":[…]}, newest first.
func (u *UI) ExecutionsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		list := []Execution{}
		if u.opts.Executions != nil {
			list = append(list, u.opts.Executions.ActiveExecutions()...)
		}
		slices.SortFunc(list, func(a, b Execution) int { return b.Started.Compare(a.Started) })
		writeJSON(w, http.StatusOK, map[string]any{"executions": list})
	})
}
