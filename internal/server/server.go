// Package server builds netproxy's long-running process in one place
// (Assemble, assemble.go, in a stated order): the policy and the decision
// pipeline, the execution registry, the HTTP and SOCKS5 front ends, the
// admin listener and the control socket (New, this file), then the audit
// log, the cluster, the approval service and the web UI on them; and it
// owns start, reload and graceful shutdown.
//
// Tests build a bare Server with New and plug parts in through the
// accessors (SetDecider, SetControlApprovals, AddSink) — never by editing
// the data path. It must never log the admin token or an execution token.
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/credentials"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/admin"
	"github.com/netproxy/netproxy/internal/config"
	"github.com/netproxy/netproxy/internal/observe"
	"github.com/netproxy/netproxy/internal/proxy"
	"github.com/netproxy/netproxy/metrics"
	"github.com/netproxy/netproxy/mitm"
	"github.com/netproxy/netproxy/rollout"
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
	// EndSink receives the end of every allowed request and connection
	// (SPEC §7.5: the audit's connection_end lines); nil: none.
	EndSink observe.ConnectionEndSink
	// ApprovalsControl serves POST /v1/approvals on the control socket.
	ApprovalsControl http.Handler
	// AdminToken overrides the token read from the variable named by
	// admin.token_env. When both are empty a random token is generated.
	AdminToken string
}

// Server is one netproxy process.
type Server struct {
	cfg *config.Config
	// liveCfg is the configuration in force (cfg until a reload).
	liveCfg atomic.Pointer[config.Config]
	opts    Options
	logger  *slog.Logger
	meter   *metrics.Metrics

	engine  *hostpolicy.Engine
	decider *deciderSlot
	// eval is the data path's chain: engine narrowed by per-execution and
	// per-session policies, with the [shadow] candidate judged beside it.
	eval     *rollout.Evaluator
	shadow   *rollout.Shadow
	scopeAPI scopeAPI
	// mitmOn: an interceptor was built at start ([mitm] enabled); reloads
	// keep it (a restart changes it).
	mitmOn   bool
	registry *attribution.Registry
	admin    *admin.Server
	token    string
	tokenGen bool
	sinks    atomic.Pointer[observe.Fanout]
	required atomic.Bool

	// creds is the credential broker (docs/credentials.md); caPEM the
	// interception CA handed to executions (a string).
	creds *credentials.Broker
	caPEM atomic.Value
	// clients are the [[proxy_auth.clients]] (SPEC §4.4, proxyauth.go).
	clients *attribution.Clients

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
	// readyDetail adds lines to /readyz (cluster mode reports its store).
	readyDetail []func() string

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
	s.liveCfg.Store(cfg)
	// In this order: the policy and everything that decides (the pipeline
	// and its parts), the admin router, then the data path on them.
	if err := s.buildPolicy(cfg); err != nil {
		return nil, err
	}
	if err := s.buildAdmin(cfg); err != nil {
		return nil, err
	}
	if err := s.buildDataPath(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// buildPolicy builds the policy snapshot, the engine (with the decider
// slot when approvals are on), the credential broker, the execution
// registry, the narrower-policy store, the shadow candidate, and the data
// path's evaluator over them.
func (s *Server) buildPolicy(cfg *config.Config) error {
	s.mitmOn = cfg.MITM.Enabled
	pol, err := loadPolicy(cfg, s.mitmOn)
	if err != nil {
		return err
	}
	var decider hostpolicy.Decider
	if cfg.Approvals.Enabled {
		// The approval service is built on this server's registry and
		// engine and amends the engine, so it is installed after New with
		// SetDecider (Assemble, step 5) — a real cycle and the one late
		// binding of the decision path (SPEC §5: until then not_allowed
		// denies).
		s.decider = &deciderSlot{}
		decider = s.decider
	}
	s.engine = hostpolicy.NewEngine(pol, decider)
	credSet, err := loadCredentials(cfg)
	if err != nil {
		return err
	}
	pa, err := loadProxyAuth(cfg)
	if err != nil {
		return err
	}
	if err := protectSecrets(credSet.Len() > 0 || len(pa.specs) > 0); err != nil {
		return err
	}
	s.creds = credentials.NewBroker(credSet)
	ca, err := credentialCA(cfg)
	if err != nil {
		return err
	}
	s.caPEM.Store(ca)
	s.recordPatterns(pol)
	s.required.Store(cfg.Attribution.Required)

	s.registry = attribution.NewRegistry()
	s.registry.SetBudgetLimits(cfg.BudgetLimits())
	s.registry.OnChange(func(string, attribution.Execution) {
		s.meter.ExecutionsActive(len(s.registry.Active()))
	})
	scopes := hostpolicy.NewScopes(attribution.DefaultSession)
	s.scopeAPI = scopeAPI{engine: s.engine, scopes: scopes}
	s.clients = &attribution.Clients{}
	s.applyProxyAuth(pa, cfg.BudgetLimits())
	// Compiles an execution's narrower policy before its token is returned.
	s.registry.OnChange(s.scopeAPI.executionChanged)
	s.shadow = rollout.NewShadow(s.meter, cfg.Metrics.MaxHostLabels)
	s.loadShadow(cfg)
	s.eval = rollout.NewEvaluator(s.engine, scopes, s.shadow, cfg.Approvals.Enabled)

	sinks := observe.Fanout{}
	if s.meter != nil {
		sinks = append(sinks, s.meter)
	}
	sinks = append(sinks, executionEvents{s.registry})
	sinks = append(sinks, s.opts.Sinks...)
	s.sinks.Store(&sinks)

	return nil
}

// buildAdmin builds the admin router and its own routes.
func (s *Server) buildAdmin(cfg *config.Config) error {
	s.token = s.opts.AdminToken
	if s.token == "" && cfg.Admin.TokenEnv != "" {
		s.token = lookupEnv(cfg.Admin.TokenEnv)
	}
	if s.token == "" {
		var b [24]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
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
	s.admin.HandleAPI("GET /api/shadow", s.eval.ShadowAPI())
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		s.HandleControl(m+" /v1/sessions/{id}/network", s.scopeAPI.sessionNetwork())
	}

	return nil
}

// buildDataPath builds the dialer, the proxy core with its MITM
// interceptor, the HTTP and SOCKS5 front ends, and the re-check loop that
// every change kicks.
func (s *Server) buildDataPath(cfg *config.Config) error {
	opts, logger := s.opts, s.logger
	parent, err := proxy.ParseParent(cfg.Network.UpstreamProxy)
	if err != nil {
		return err
	}
	s.tracker = proxy.NewTracker(cfg.Limits.MaxConnections, s.meter)
	s.dialer = &proxy.Dialer{
		ConnectTimeout:    cfg.Limits.ConnectTimeout.Duration,
		Parent:            parent,
		AllowLocalBinding: s.engine.AllowLocalBinding,
		Resolver:          s.engine.Resolver(),
		CheckAddr:         s.engine.CheckDialAddr,
		Meter:             s.meter,
	}
	instance, err := proxy.NewInstanceID()
	if err != nil {
		return err
	}
	s.dialer.Via = proxy.ViaValue(instance)
	// Quiet tunnel directions wait here without a goroutine (idle tunnels
	// cost their sockets and a few hundred bytes); closed by Shutdown.
	parker, err := proxy.NewParker()
	if err != nil {
		return fmt.Errorf("tunnel parker: %w", err)
	}
	core := &proxy.Core{
		Parker:     parker,
		Closed:     opts.ConnectionSink,
		Ends:       opts.EndSink,
		Instance:   instance,
		Pipeline:   s.eval,
		Dialer:     s.dialer,
		Executions: s.registry,
		Sink:       decisionSinks{&s.sinks},
		Meter:      s.meter,
		Logger:     logger,
		Tracker:    s.tracker,
		// Credentials: the broker (docs/credentials.md).
		Credentials: s.creds,
		// Clients: proxy authentication (SPEC §4.4).
		Clients: s.clients,
		Limits: proxy.Limits{
			HeaderTimeout:  cfg.Limits.HeaderTimeout.Duration,
			IdleTimeout:    cfg.Limits.IdleTimeout.Duration,
			MaxHeaderBytes: cfg.Limits.MaxHeaderBytes,
			MaxHeaders:     cfg.Limits.MaxHeaders,
		},
	}
	if cfg.MITM.Enabled {
		// Opt-in interception of limited-mode CONNECT (docs/proxy.md).
		if core.MITM, err = newInterceptor(cfg); err != nil {
			parker.Close()
			return err
		}
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
	// A session's narrower policy reaches its open connections the same way.
	s.scopeAPI.scopes.Subscribe(s.rechecks.Kick)
	// SPEC §4.2: ending an execution closes its connections at once.
	s.registry.OnChange(func(kind string, e attribution.Execution) {
		if kind == attribution.ExecutionEnded {
			core.CloseExecution(e.ID)
			s.creds.Forget(e.ID) // its placeholders are dead from now on
		}
	})

	return nil
}

// newInterceptor loads [mitm]'s CA and upstream roots.
func newInterceptor(cfg *config.Config) (*mitm.Interceptor, error) {
	ca, err := mitm.LoadAuthority(cfg.MITM.CACert, cfg.MITM.CAKey, 0)
	if err != nil {
		return nil, err
	}
	roots, err := mitm.UpstreamRoots(cfg.MITM.UpstreamCA)
	if err != nil {
		return nil, err
	}
	return &mitm.Interceptor{Authority: ca, Roots: roots, Idle: cfg.Limits.IdleTimeout.Duration,
		MaxHeaderBytes: cfg.Limits.MaxHeaderBytes, MaxHeaders: cfg.Limits.MaxHeaders, HeaderTimeout: cfg.Limits.HeaderTimeout.Duration}, nil
}

// LoadPolicy is the one policy builder of serve, reload and `netproxy
// check`: cfg's lists, domain files, [dns], mode, kill switch and MITM
// admission, plus the network_rule()s persisted in $NETPROXY_HOME/rules
// (approved allow_always / deny_always amendments).
func LoadPolicy(cfg *config.Config) (*hostpolicy.Snapshot, error) {
	return loadPolicy(cfg, cfg.MITM.Enabled)
}

// loadPolicy is LoadPolicy with MITM admission given: a running server
// admits to interception only when it built an interceptor at start.
func loadPolicy(cfg *config.Config, mitm bool) (*hostpolicy.Snapshot, error) {
	o, err := config.PolicyOptions(cfg)
	if err != nil {
		return nil, err
	}
	o.MITM = mitm
	return hostpolicy.Load(o, config.RulesDir())
}

// loadShadow compiles cfg's [shadow] candidate exactly like the live
// policy (lists, domain files, [dns], mode, kill switch, rules, MITM
// admission of this process). A candidate that does not load leaves no
// shadow policy: the error is logged, counted and shown by /api/shadow;
// the live policy is never affected.
func (s *Server) loadShadow(cfg *config.Config) {
	path := cfg.Shadow.Config
	if path == "" {
		s.shadow.Set("", nil)
		s.meter.ShadowConfig(true, false)
		return
	}
	cand, err := config.Load(path)
	var snap *hostpolicy.Snapshot
	if err == nil {
		snap, err = loadPolicy(cand, s.mitmOn)
	}
	if err != nil {
		err = fmt.Errorf("shadow.config %s: %w", path, err)
		s.shadow.SetError(path, err)
		s.meter.ShadowConfig(false, false)
		s.logger.Error("shadow policy did not load; the live policy is unaffected", "error", err.Error())
		return
	}
	s.shadow.Set(path, snap)
	s.meter.ShadowConfig(true, true)
	s.logger.Info("shadow policy loaded", "config", path)
}

// Shadow is the [shadow] candidate policy and its disagreement summary.
func (s *Server) Shadow() *rollout.Shadow { return s.shadow }

// Rollout is the data path's evaluator (narrower policies, shadow).
func (s *Server) Rollout() *rollout.Evaluator { return s.eval }

func (s *Server) recordPatterns(p *hostpolicy.Snapshot) {
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

// AddSink adds a decision sink (call before Start).
func (s *Server) AddSink(sink observe.DecisionSink) {
	cur := *s.sinks.Load()
	next := append(append(observe.Fanout{}, cur...), sink)
	s.sinks.Store(&next)
}

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
	s.control = attribution.NewControlServer(s.registry, s.advertised(attribution.ProxyInfo{HTTP: addrs.HTTP, SOCKS5: addrs.SOCKS5}), s.ctlApprv)
	s.control.SetNetworkCheck(s.scopeAPI.checkExecution)
	for _, r := range s.ctlRoutes {
		s.control.Handle(r.pattern, r.h)
	}
	s.control.SetMinter(s.mintCredentials)
	s.control.Handle("GET "+attribution.SecretPathsPath, http.HandlerFunc(s.serveSecretPaths))
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
	s.core.Parker.Close() // every tunnel has ended: none is parked
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
	for _, f := range s.readyDetail {
		w.Write([]byte(f() + "\n"))
	}
}

// AddReadyDetail adds a line to the body of /readyz (call before Start);
// it does not change the status code.
func (s *Server) AddReadyDetail(f func() string) { s.readyDetail = append(s.readyDetail, f) }

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
	// One snapshot: lists, address entries, [dns] (static answers and
	// servers), mode, kill switch and MITM admission change in one store.
	pol, err := loadPolicy(cfg, s.mitmOn)
	if err != nil {
		return err
	}
	// Secrets are re-read (secret_file too); one missing fails the reload
	// and every previous credential stays.
	credSet, err := loadCredentials(cfg)
	if err != nil {
		return err
	}
	// Client secrets too: one unreadable keeps every previous client.
	pa, err := loadProxyAuth(cfg)
	if err != nil {
		return err
	}
	ca, err := credentialCA(cfg)
	if err != nil {
		return err
	}
	wasEnabled := s.engine.Enabled()
	if err := protectSecrets(credSet.Len() > 0 || len(pa.specs) > 0); err != nil {
		return err
	}
	s.engine.Swap(pol)
	s.creds.Swap(credSet)
	s.caPEM.Store(ca)
	s.liveCfg.Store(cfg)
	s.required.Store(cfg.Attribution.Required)
	// New executions get the new [budgets]; running ones keep theirs.
	s.registry.SetBudgetLimits(cfg.BudgetLimits())
	// Clients keep their usage under the new limits.
	s.applyProxyAuth(pa, cfg.BudgetLimits())
	s.recordPatterns(pol)
	// The candidate is reloaded with the live policy; its failure is its own.
	s.loadShadow(cfg)
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
