// Package approvalsvc owns the approval service of SPEC §5: the decider the
// decision chain consults for an allow-list miss (not_allowed) and for exec
// approval requests — owner resolution, per-session allow/deny caches, one
// review per key for concurrent requests, fail-closed gates, hooks, the
// Guardian and the human review queue, outcomes and amendments — plus the
// admin API for pending approvals and blocked requests.
//
// It must never turn any decision other than not_allowed into an allow (a
// deny-list hit or a local/private block is final), never allow on an error,
// a timeout or an unparsable answer, and never log or store a token, a query
// string or a header value.
package approvalsvc

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/netproxy/netproxy/approvalsvc/settings"
	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/guardian"
)

// DefaultSession is where unattributed requests belong (SPEC §4.3).
const DefaultSession = attribution.DefaultSession

// DefaultReviewTimeout bounds a human review when the settings give none.
const DefaultReviewTimeout = settings.DefaultReviewTimeout

// Settings are the service's own settings (internal/config maps the
// [approvals] table onto them); settings.Settings.Validate checks them.
type Settings = settings.Settings

// Reviewer labels used in outcomes, metrics and the audit.
const (
	byUser     = "user"
	byGuardian = "guardian"
	byHook     = "hook"
	byCache    = "cache"
	byPolicy   = "policy"
)

// Options configures a Service. Only Settings is required (zero fields take
// their defaults); every dependency may be nil (then its effect is skipped,
// and for reviewers the request is denied: fail closed).
type Options struct {
	Settings Settings
	// Guardian is the automated reviewer; nil makes guardian-routed reviews
	// deny ("no reviewer reachable").
	Guardian guardian.Reviewer
	// UserReviewer says a human can decide: the admin API is served with a
	// bearer token. False makes user-routed reviews deny at once.
	UserReviewer bool

	Owners    Owners
	Publisher Publisher
	Amender   Amender
	Rules     RulePersister
	Metrics   Metrics
	Audit     Auditor
	Logger    *slog.Logger
	// Coordinator shares network reviews, their pending list and the
	// session caches with the other replicas (cluster mode); nil: this
	// process alone.
	Coordinator Coordinator

	// HookEnv is the environment hooks run with; nil means this process's
	// environment without the variables named in SecretEnv.
	HookEnv   []string
	SecretEnv []string

	// CacheSize bounds each session's allow and deny caches (default 4096);
	// MaxSessions bounds the sessions kept (default 1024, least recently
	// used dropped first).
	CacheSize   int
	MaxSessions int

	Now func() time.Time
}

// Service is the approval service. It implements hostpolicy.Decider and
// observe.DecisionSink. It is safe for concurrent use.
type Service struct {
	enabled  bool
	policy   ApprovalPolicy
	reviewer string
	timeout  time.Duration
	// clientWaitMax bounds one request's wait for its review (SPEC §3.7).
	clientWaitMax time.Duration
	hooks         []Hook
	hookEnv       []string

	// maxPending and maxPerSession bound the reviews in progress (SPEC §5).
	maxPending    int
	maxPerSession int

	guardian     guardian.Reviewer
	userReviewer bool
	owners       Owners
	publisher    Publisher
	amender      Amender
	rules        RulePersister
	metrics      Metrics
	audit        Auditor
	coord        Coordinator
	log          *slog.Logger
	now          func() time.Time

	cacheSize int
	sessMu    sync.Mutex
	sessions  *lru.Cache[string, *session]

	flightMu  sync.Mutex
	flights   map[cacheKey]*flight
	inSession map[string]int // reviews in progress per session
	// left holds the results of network reviews that ended with no
	// requester waiting, each for one identical retry (clientwait.go).
	left map[cacheKey]leftResult

	persistMu sync.Mutex // serialises amendments (live list + rules file)

	queue   *queue
	blocked *blockedRing
	bus     *bus

	ctx    context.Context // lifetime of reviews; cancelled by Close
	cancel context.CancelFunc
}

// New builds a Service from opts. Configuration errors name their key.
func New(opts Options) (*Service, error) {
	cfg := opts.Settings.WithDefaults()
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("approvals.%s", errs[0].Error())
	}
	pol, err := ParsePolicy(cfg.Policy)
	if err != nil {
		return nil, fmt.Errorf("approvals.policy: %v", err)
	}
	rev, err := ParseReviewer(cfg.Reviewer)
	if err != nil {
		return nil, fmt.Errorf("approvals.reviewer: %v", err)
	}
	hooks := make([]Hook, 0, len(cfg.Hooks))
	for _, h := range cfg.Hooks {
		hooks = append(hooks, Hook{Command: append([]string(nil), h.Command...), Timeout: h.Timeout})
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = 4096
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = 1024
	}
	sessions, err := lru.New[string, *session](opts.MaxSessions)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	env := opts.HookEnv
	if env == nil {
		env = filterEnv(os.Environ(), opts.SecretEnv)
	}
	s := &Service{
		enabled: cfg.Enabled, policy: pol, reviewer: rev, timeout: cfg.Timeout, clientWaitMax: cfg.ClientWait, hooks: hooks, hookEnv: env,
		left:       map[cacheKey]leftResult{},
		maxPending: cfg.MaxPending, maxPerSession: cfg.MaxPendingPerSession, inSession: map[string]int{},
		guardian: opts.Guardian, userReviewer: opts.UserReviewer, owners: opts.Owners, publisher: opts.Publisher,
		amender: opts.Amender, rules: opts.Rules, metrics: opts.Metrics, audit: opts.Audit, coord: opts.Coordinator, log: log, now: now,
		cacheSize: opts.CacheSize, sessions: sessions, flights: map[cacheKey]*flight{},
		queue: newQueue(), blocked: newBlockedRing(BlockedCapacity), bus: newBus(),
	}
	if s.metrics == nil {
		s.metrics = noMetrics{}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close aborts every review in flight (their waiters are denied).
func (s *Service) Close() { s.cancel() }

type noMetrics struct{}

func (noMetrics) ApprovalPending(int)                                    {}
func (noMetrics) ApprovalResolved(string, string, string, time.Duration) {}

// filterEnv drops the named variables (secrets hooks must not see).
func filterEnv(env, drop []string) []string {
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		for _, d := range drop {
			if d != "" && name == d {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}
