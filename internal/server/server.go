// Package server wires netproxy's long-running process together: it
// compiles the policy, builds the decision engine, the execution registry,
// the HTTP and SOCKS5 front ends, the admin listener and the control socket,
// and owns start, reload and graceful shutdown.
//
// Other parts plug in through Options and the accessors (Registry, Engine,
// Admin, SetDecider, SetControlApprovals, AddSink) — never by editing the
// data path. It must never log the admin token or an execution token.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/admin"
	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/observe"
	"github.com/netproxy/netproxy/internal/proxy"
	"github.com/netproxy/netproxy/metrics"
	"github.com/netproxy/netproxy/mitm"
)

// Options are what other parts plug into the server.
type Options struct {
	Logger  *slog.Logger
	Metrics *metrics.Metrics // nil: no metrics (every call is a no-op)
	// Sinks receive every finished network decision (audit, blocked ring…).
	Sinks observe.Fanout
	// ConnectionSink receives every open connection closed by a change
	// (SPEC §3.9: the audit's connection_closed lines); nil: none.
	ConnectionSink observe.ConnectionSink
	// Decider is the approval service behind not_allowed. It is consulted
	// only when approvals.enabled; SetDecider may install it later.
	Decider hostpolicy.Decider
	// ApprovalsControl serves POST /v1/approvals on the control socket.
	ApprovalsControl http.Handler
	// AdminToken overrides the token read from the variable named by
	// admin.token_env. When both are empty a random token is generated.
	AdminToken string
	// Setup runs inside New once the registry, engine and admin router
	// exist and before anything listens: the place to build services that
	// need them and to register their routes.
	Setup func(*Server) error
}

// Server is one netproxy process.
type Server struct {
	cfg    *config.Config
	opts   Options
	logger *slog.Logger
	meter  *metrics.Metrics

	engine   *hostpolicy.Engine
	resolver *hostpolicy.ReloadableResolver
	decider  *deciderSlot
	registry *attribution.Registry
	admin    *admin.Server
	token    string
	tokenGen bool
	sinks    atomic.Pointer[observe.Fanout]
	required atomic.Bool

	tracker  *proxy.Tracker
	dialer   *proxy.Dialer
	core     *proxy.Core
	rechecks *proxy.Rechecks
	httpP    *proxy.HTTPProxy
	socksP   *proxy.SOCKSProxy

	control  *attribution.ControlServer
	ctlApprv http.Handler
	// ctlRoutes are extra control-socket routes added with HandleControl.
	ctlRoutes []controlRoute

	reloadMu sync.Mutex
	ready    atomic.Bool

	// set by Start
	httpGate, socksGate *proxy.Gate
	adminSrv            *http.Server
	adminLn             net.Listener
	controlLn           net.Listener
	controlPath         string
	serveCancel         context.CancelFunc
	bg                  sync.WaitGroup
}

// New builds a server from cfg without binding anything.
func New(cfg *config.Config, opts Options) (*Server, error) {
	if cfg == nil {
		cfg = config.Default()
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, opts: opts, logger: logger, meter: opts.Metrics, ctlApprv: opts.ApprovalsControl}

	pol, err := compile(cfg)
	if err != nil {
		return nil, err
	}
	resolver, err := hostpolicy.NewResolverFromConfig(cfg)
	if err != nil {
		return nil, err
	}
	var decider hostpolicy.Decider
	if cfg.Approvals.Enabled {
		s.decider = &deciderSlot{}
		s.decider.set(opts.Decider)
		decider = s.decider
	}
	s.resolver = resolver
	s.engine = hostpolicy.NewEngine(pol, resolver, cfg.Network.Mode, decider)
	s.recordPatterns(pol)
	s.required.Store(cfg.Attribution.Required)

	s.registry = attribution.NewRegistry()
	s.registry.OnChange(func(string, attribution.Execution) {
		s.meter.ExecutionsActive(len(s.registry.Active()))
	})

	sinks := observe.Fanout{}
	if s.meter != nil {
		sinks = append(sinks, s.meter)
	}
	sinks = append(sinks, executionEvents{s.registry})
	sinks = append(sinks, opts.Sinks...)
	s.sinks.Store(&sinks)

	s.token = opts.AdminToken
	if s.token == "" && cfg.Admin.TokenEnv != "" {
		s.token = lookupEnv(cfg.Admin.TokenEnv)
	}
	if s.token == "" {
		var b [24]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		s.token, s.tokenGen = hex.EncodeToString(b[:]), true
	}
	s.admin = admin.New(s.token, admin.AllowedHosts(cfg.Admin.AllowedHosts))
	s.admin.Handle("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	}))
	s.admin.Handle("GET /readyz", http.HandlerFunc(s.readyz))
	if s.meter != nil {
		s.admin.Handle("GET /metrics", s.meter.Handler())
	}
	s.admin.HandleAPI("POST /api/reload", http.HandlerFunc(s.apiReload))

	parent, err := proxy.ParseParent(cfg.Network.UpstreamProxy)
	if err != nil {
		return nil, err
	}
	s.tracker = proxy.NewTracker(cfg.Limits.MaxConnections, s.meter)
	s.dialer = &proxy.Dialer{
		ConnectTimeout:    cfg.Limits.ConnectTimeout.Duration,
		Parent:            parent,
		AllowLocalBinding: s.engine.AllowLocalBinding,
		Resolver:          s.engine.Resolver(),
		Meter:             s.meter,
	}
	instance, err := proxy.NewInstanceID()
	if err != nil {
		return nil, err
	}
	s.dialer.Via = proxy.ViaValue(instance)
	core := &proxy.Core{
		Recheck:    s.engine,
		Closed:     opts.ConnectionSink,
		Instance:   instance,
		Engine:     s.engine,
		Dialer:     s.dialer,
		Executions: s.registry,
		Sink:       sinkFunc(s.observe),
		Meter:      s.meter,
		Logger:     logger,
		Tracker:    s.tracker,
		Limits: proxy.Limits{
			HeaderTimeout:  cfg.Limits.HeaderTimeout.Duration,
			IdleTimeout:    cfg.Limits.IdleTimeout.Duration,
			MaxHeaderBytes: cfg.Limits.MaxHeaderBytes,
			MaxHeaders:     cfg.Limits.MaxHeaders,
		},
	}
	if cfg.MITM.Enabled {
		// Opt-in interception of limited-mode CONNECT (docs/proxy.md).
		ca, err := mitm.LoadAuthority(cfg.MITM.CACert, cfg.MITM.CAKey, 0)
		if err != nil {
			return nil, err
		}
		roots, err := mitm.UpstreamRoots(cfg.MITM.UpstreamCA)
		if err != nil {
			return nil, err
		}
		core.MITM = &mitm.Interceptor{Authority: ca, Roots: roots, Idle: cfg.Limits.IdleTimeout.Duration,
			MaxHeaderBytes: cfg.Limits.MaxHeaderBytes, MaxHeaders: cfg.Limits.MaxHeaders}
	}
	s.httpP = proxy.NewHTTP(core)
	s.socksP = proxy.NewSOCKS(core)
	s.core = core
	// SPEC §3.9: every policy change (reload, allow_always/deny_always,
	// kill switch) re-checks the open connections; pooled upstream
	// connections were dialed under the old policy and are dropped.
	s.rechecks = proxy.NewRechecks(core)
	s.rechecks.Before = s.httpP.CloseIdle
	s.engine.Subscribe(s.rechecks.Kick)
	// SPEC §4.2: ending an execution closes its connections at once.
	s.registry.OnChange(func(kind string, e attribution.Execution) {
		if kind == attribution.ExecutionEnded {
			core.CloseExecution(e.ID)
		}
	})

	if opts.Setup != nil {
		if err := opts.Setup(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// compile builds the policy from cfg plus the network_rule entries of
// $NETPROXY_HOME/rules (approved allow_always / deny_always amendments).
func compile(cfg *config.Config) (*hostpolicy.Policy, error) {
	var extra []hostpolicy.Entry
	dir := filepath.Join(config.HomeDir(), "rules")
	rules, err := execpolicy.LoadDirs(dir)
	if err != nil {
		return nil, fmt.Errorf("rules in %s: %w", dir, err)
	}
	for _, r := range rules.NetworkRules() {
		switch r.Decision {
		case "allow", "deny":
			extra = append(extra, hostpolicy.Entry{Pattern: r.Host, Decision: r.Decision, Origin: fmt.Sprintf("%s:%d", r.File, r.Line)})
		}
	}
	return hostpolicy.Compile(cfg, extra...)
}

func (s *Server) recordPatterns(p *hostpolicy.Policy) {
	allow, deny := p.PatternCounts()
	s.meter.PolicyPatterns("allow", allow)
	s.meter.PolicyPatterns("deny", deny)
}

// Config returns the configuration the server started with.
func (s *Server) Config() *config.Config { return s.cfg }

// Registry is the execution registry (owner resolution, event streams).
func (s *Server) Registry() *attribution.Registry { return s.registry }

// Engine is the decision engine (Amend for allow_always / deny_always).
func (s *Server) Engine() *hostpolicy.Engine { return s.engine }

// Admin is the admin router; register routes before Start.
func (s *Server) Admin() *admin.Server { return s.admin }

// Metrics returns the metrics passed in Options (may be nil).
func (s *Server) Metrics() *metrics.Metrics { return s.meter }

// Logger is the server's logger.
func (s *Server) Logger() *slog.Logger { return s.logger }

// AdminToken is the bearer token of /api/*.
func (s *Server) AdminToken() string { return s.token }

// AdminTokenGenerated reports whether the token was generated at start
// (no admin.token_env value was set).
func (s *Server) AdminTokenGenerated() bool { return s.tokenGen }

// SetDecider installs the approval service. It has an effect only when
// approvals.enabled; until it is set, not_allowed requests are denied by
// the decider stage (no reviewer reachable: fail closed).
func (s *Server) SetDecider(d hostpolicy.Decider) {
	if s.decider != nil {
		s.decider.set(d)
	}
}

// Decider is the approval service installed with Options.Decider or
// SetDecider (nil when none is, or approvals are disabled); parts built on
// it, such as the web UI's event relay, look it up here.
func (s *Server) Decider() hostpolicy.Decider {
	if s.decider == nil {
		return nil
	}
	if p := s.decider.d.Load(); p != nil {
		return *p
	}
	return nil
}

// SetControlApprovals installs the handler of POST /v1/approvals.
func (s *Server) SetControlApprovals(h http.Handler) {
	s.ctlApprv = h
	if s.control != nil {
		s.control.SetApprovals(h)
	}
}

type controlRoute struct {
	pattern string
	h       http.Handler
}

// HandleControl adds a route to the control socket's API (call before
// Start), e.g. metrics.ExecDecisionPath for execwrap's exec decisions.
func (s *Server) HandleControl(pattern string, h http.Handler) {
	s.ctlRoutes = append(s.ctlRoutes, controlRoute{pattern, h})
}

// Sinks returns the decision sinks passed in Options, so a service set up
// later can find one it reports to (the approval service finds the audit
// writer here).
func (s *Server) Sinks() observe.Fanout { return s.opts.Sinks }

// AddSink adds a decision sink (call before Start).
func (s *Server) AddSink(sink observe.DecisionSink) {
	cur := *s.sinks.Load()
	next := append(append(observe.Fanout{}, cur...), sink)
	s.sinks.Store(&next)
}

func (s *Server) observe(e observe.DecisionEvent) {
	s.sinks.Load().ObserveDecision(e)
}

type sinkFunc func(observe.DecisionEvent)

func (f sinkFunc) ObserveDecision(e observe.DecisionEvent) { f(e) }

// executionEvents puts every attributed decision on its execution's stream.
type executionEvents struct{ reg *attribution.Registry }

func (x executionEvents) ObserveDecision(e observe.DecisionEvent) {
	id := e.Request.ExecutionID
	if id == "" {
		return
	}
	verdict := string(e.Decision.Verdict)
	x.reg.Publish(id, attribution.Event{
		Type: attribution.EventNetworkDecision, Time: e.Time.UTC(), Host: e.Decision.Host, Port: e.Decision.Port,
		Protocol: string(e.Request.Protocol), Decision: verdict, Reason: string(e.Decision.Reason),
		Source: string(e.Decision.Source), ApprovalID: e.Decision.ApprovalID,
	})
}

// deciderSlot lets the approval service be installed after the engine
// exists. Empty, it denies: approvals are on but no reviewer is reachable.
type deciderSlot struct {
	d atomic.Pointer[hostpolicy.Decider]
}

func (s *deciderSlot) set(d hostpolicy.Decider) {
	if d == nil {
		s.d.Store(nil)
		return
	}
	s.d.Store(&d)
}

func (s *deciderSlot) Decide(ctx context.Context, req hostpolicy.Request, base hostpolicy.Decision) hostpolicy.Decision {
	if p := s.d.Load(); p != nil {
		return (*p).Decide(ctx, req, base)
	}
	out := base
	out.Verdict, out.Reason = hostpolicy.Deny, hostpolicy.ReasonNotAllowed
	return out
}

// Addrs are the bound listener addresses (valid after Start).
type Addrs struct {
	HTTP, SOCKS5, Admin, Control string
}

// Addrs returns where the server listens.
func (s *Server) Addrs() Addrs {
	a := Addrs{Control: s.controlPath}
	if s.httpGate != nil {
		a.HTTP = s.httpGate.Addr().String()
	}
	if s.socksGate != nil {
		a.SOCKS5 = s.socksGate.Addr().String()
	}
	if s.adminLn != nil {
		a.Admin = s.adminLn.Addr().String()
	}
	return a
}

// ApprovalsURL is the approvals page; with a generated token it carries the
// token so the printed link works.
func (s *Server) ApprovalsURL() string {
	u := "http://" + s.Addrs().Admin + "/"
	if s.tokenGen {
		u += "#token=" + s.token
	}
	return u
}

func listen(key, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, errAddrInUse) {
			return nil, fmt.Errorf("%s = %q: the address is already in use; stop the process holding it or choose another address in the config", key, addr)
		}
		return nil, fmt.Errorf("%s = %q: cannot listen: %w", key, addr, err)
	}
	return ln, nil
}

// Start binds every listener and serves until Shutdown. On any bind error
// nothing stays open.
func (s *Server) Start(ctx context.Context) (err error) {
	var opened []interface{ Close() error }
	defer func() {
		if err != nil {
			for _, c := range opened {
				c.Close()
			}
		}
	}()
	httpLn, err := listen("listen.http", s.cfg.Listen.HTTP)
	if err != nil {
		return err
	}
	opened = append(opened, httpLn)
	socksLn, err := listen("listen.socks5", s.cfg.Listen.SOCKS5)
	if err != nil {
		return err
	}
	opened = append(opened, socksLn)
	adminLn, err := listen("listen.admin", s.cfg.Listen.Admin)
	if err != nil {
		return err
	}
	opened = append(opened, adminLn)
	controlLn, err := attribution.ListenUnix(s.cfg.Control.Socket)
	if err != nil {
		return err
	}
	opened = append(opened, controlLn)

	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.serveCancel = cancel
	hdr := s.cfg.Limits.HeaderTimeout.Duration
	gate := func(name string, ln net.Listener) *proxy.Gate {
		return proxy.NewGate(ln, proxy.GateConfig{
			Name: name, Tracker: s.tracker, Registry: s.registry, Required: s.required.Load,
			FirstByte: hdr, FrameTimeout: attribution.FrameTimeout, Meter: s.meter, Logger: s.logger,
		})
	}
	s.httpGate = gate("http", httpLn)
	s.socksGate = gate("socks5", socksLn)
	s.adminLn = adminLn
	s.controlLn = controlLn
	// SPEC §3.5: never dial a listener of this process.
	s.dialer.SetSelf(proxy.NewSelfAddrs(httpLn.Addr(), socksLn.Addr(), adminLn.Addr()))
	s.controlPath = s.cfg.Control.Socket

	addrs := s.Addrs()
	s.control = attribution.NewControlServer(s.registry, attribution.ProxyInfo{HTTP: addrs.HTTP, SOCKS5: addrs.SOCKS5}, s.ctlApprv)
	for _, r := range s.ctlRoutes {
		s.control.Handle(r.pattern, r.h)
	}
	s.adminSrv = &http.Server{Handler: s.admin, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}

	s.bg.Add(5)
	go func() { defer s.bg.Done(); s.rechecks.Run(sctx) }()
	go func() { defer s.bg.Done(); s.httpP.Serve(sctx, s.httpGate) }()
	go func() { defer s.bg.Done(); s.socksP.Serve(sctx, s.socksGate) }()
	go func() {
		defer s.bg.Done()
		if err := s.adminSrv.Serve(adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("admin listener stopped", "error", err.Error())
		}
	}()
	go func() {
		defer s.bg.Done()
		if err := s.control.Serve(controlLn); err != nil {
			s.logger.Error("control socket stopped", "error", err.Error())
		}
	}()
	s.ready.Store(true)
	return nil
}

// Shutdown stops accepting, lets requests and tunnels finish until ctx is
// done, then closes everything left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ready.Store(false)
	if s.httpGate != nil {
		s.httpGate.Close()
		s.socksGate.Close()
	}
	err := s.tracker.Shutdown(ctx)
	if s.serveCancel != nil {
		s.serveCancel()
	}
	if s.httpGate != nil {
		s.httpGate.Wait()
		s.socksGate.Wait()
	}
	s.httpP.Wait()
	s.socksP.Wait()
	s.httpP.CloseIdle()
	if s.adminSrv != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		s.adminSrv.Shutdown(actx)
		s.control.Shutdown(actx)
		cancel()
		s.adminSrv.Close()
	}
	s.bg.Wait()
	return err
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !s.ready.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("not ready\n"))
		return
	}
	w.Write([]byte("ready\n"))
}

// Reload re-reads the configuration file (the embedded default when the
// server started without one) and the rules, and swaps the policy. On any
// error the previous policy stays, and the error is logged and counted.
// Listeners, limits, approvals and the control socket keep their
// start-up values (a restart changes them).
func (s *Server) Reload() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	err := s.reload()
	s.meter.PolicyReload(err == nil)
	if err != nil {
		s.logger.Error("policy reload failed; keeping the previous policy", "error", err.Error())
		return err
	}
	s.logger.Info("policy reloaded", "config", s.cfg.Path)
	return nil
}

func (s *Server) reload() error {
	cfg := config.Default()
	if s.cfg.Path != "" {
		var err error
		if cfg, err = config.Load(s.cfg.Path); err != nil {
			return err
		}
	}
	pol, err := compile(cfg)
	if err != nil {
		return err
	}
	// [dns] is policy too: the static answers decide what the local guard
	// sees, so they change with the lists, never half of them.
	answers, err := s.resolver.Prepare(cfg)
	if err != nil {
		return err
	}
	wasEnabled := s.engine.Enabled()
	s.resolver.Install(answers)
	s.engine.Swap(pol, cfg.Network.Mode)
	s.required.Store(cfg.Attribution.Required)
	s.recordPatterns(pol)
	switch {
	case wasEnabled && !pol.Enabled():
		// The kill switch: new requests are refused from the Swap on; the
		// connections already open (tunnels above all) are cut here.
		n := s.core.CloseAllFor(proxy.CloseProxyDisabled)
		s.logger.Warn("network.enabled = false: every request is now refused with proxy_disabled; closed the open proxy connections", "closed", n)
	case !wasEnabled && pol.Enabled():
		s.logger.Warn("network.enabled = true: the proxy serves requests again")
	}
	return nil
}

func (s *Server) apiReload(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if err := s.Reload(); err != nil {
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprintf(w, "{\"status\":\"error\",\"error\":%q}\n", err.Error())
		return
	}
	w.Write([]byte("{\"status\":\"reloaded\"}\n"))
}
