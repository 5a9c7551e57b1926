package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/netproxy/netproxy/approvalsvc"
	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/cluster/settings"
	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/hostpolicy"
)

// Timing of cluster mode.
const (
	heartbeatEvery = time.Second
	// nodeTTL: a replica whose heartbeat is older is dead; its executions
	// expire (are ended on every replica).
	nodeTTL = 10 * time.Second
	// forgetNodeAfter drops a dead replica from the nodes list.
	forgetNodeAfter = time.Hour
	decisionTTL     = time.Hour
	cacheTTL        = 7 * 24 * time.Hour
	streamMaxLen    = 100000
	opTimeout       = 2 * time.Second
	retryEvery      = 250 * time.Millisecond
)

// Executions is what the cluster needs of the execution registry.
// *attribution.Registry implements it; ending an execution goes through its
// Revoke, which closes the execution's connections.
type Executions interface {
	OnChange(func(kind string, e attribution.Execution))
	Adopt(e attribution.Execution, tokenKey [32]byte) bool
	TokenKey(id string) ([32]byte, bool)
	Get(id string) (attribution.Execution, bool)
	Active() []attribution.Execution
	Revoke(id string) bool
	SetMissResolver(func(tokenKey [32]byte) bool)
}

// Amender applies an amendment to the live lists. *hostpolicy.Engine
// implements it.
type Amender interface {
	Amend(host string, d hostpolicy.Verdict)
}

// RulePersister mirrors amendments into this replica's rules file.
type RulePersister interface {
	AppendNetworkRule(r execpolicy.NetworkRule) (bool, error)
	AppendPrefixRule(tokens []string) (bool, error)
}

// Reviews receives the review changes other replicas make.
// *approvalsvc.Service implements it.
type Reviews interface {
	ApplyClusterCache(k approvalsvc.ReviewKey, outcome string)
	ApplyClusterCreated(a approvalsvc.Approval)
	ApplyClusterDecision(d approvalsvc.ClusterDecision)
}

// Options configures a Cluster.
type Options struct {
	Settings   settings.Settings
	Executions Executions
	Amender    Amender
	Rules      RulePersister
	Logger     *slog.Logger
	// Registerer receives the cluster metrics (nil: none).
	Registerer prometheus.Registerer
}

// Cluster is this replica's membership in a cluster. It implements
// approvalsvc.Coordinator.
type Cluster struct {
	cfg  settings.Settings
	k    keys
	rdb  redis.UniversalClient
	node string
	log  *slog.Logger

	execs   Executions
	amender Amender
	rules   RulePersister
	reviews atomic.Pointer[reviewsBox]

	up      atomic.Bool
	lastErr atomic.Pointer[string]
	pos     atomic.Pointer[string]
	started time.Time
	m       *clusterMetrics
	seal    sealer
	replay  *replayGuard

	mu       sync.Mutex
	adopted  map[string]string   // execution id → origin node (executions of other replicas)
	ending   map[string]bool     // executions being ended because the stream said so
	beats    map[string]int64    // node → last verified heartbeat (unix ms)
	ownKeys  map[string]string   // this replica's execution id → token digest (hex), to unindex at its end
	ownPH    map[string][]string // this replica's execution id → its placeholder digests (placeholders.go)
	waiters  map[string][]chanDecision
	outbox   chan func(context.Context) error
	cancel   context.CancelFunc
	bg       sync.WaitGroup
	closeOne sync.Once
}

type reviewsBox struct{ r Reviews }

// Open reads cluster.key_file, connects to Redis, checks the key schema
// (writing it into an empty prefix) and loads nothing yet; Start begins
// following the cluster. Any error names the setting (cluster.key_file,
// cluster.redis) and what failed; the caller exits 2.
func Open(ctx context.Context, opts Options) (*Cluster, error) {
	cfg := opts.Settings.WithDefaults()
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("cluster.%s", errs[0].Error())
	}
	key, err := LoadKey(cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	uo, err := redisOptions(cfg)
	if err != nil {
		return nil, err
	}
	uo.DialTimeout, uo.ReadTimeout, uo.WriteTimeout, uo.PoolTimeout = time.Second, time.Second, time.Second, time.Second
	uo.MaxRetries = 1
	uo.ContextTimeoutEnabled = true
	uo.ClientName = "netproxy-" + cfg.NodeID
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	installRedisLog(log.With("component", "redis"), uo.Password, uo.SentinelPassword)
	c := &Cluster{
		cfg: cfg, k: keys{cfg.KeyPrefix}, rdb: redis.NewUniversalClient(uo), node: cfg.NodeID, log: log,
		execs: opts.Executions, amender: opts.Amender, rules: opts.Rules, started: time.Now(),
		m: newMetrics(opts.Registerer), seal: sealer{key}, replay: newReplayGuard(),
		adopted: map[string]string{}, ending: map[string]bool{}, waiters: map[string][]chanDecision{}, beats: map[string]int64{}, ownKeys: map[string]string{}, ownPH: map[string][]string{},
		outbox: make(chan func(context.Context) error, 4096),
	}
	c.pos.Store(new(string))
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := c.rdb.Ping(cctx).Err(); err != nil {
		c.rdb.Close()
		return nil, fmt.Errorf("cluster.redis: cannot reach Redis at %s: %v%s", settings.Redact(cfg.Redis), err, accessHint(err, cfg))
	}
	if err := c.checkSchema(cctx); err != nil {
		c.rdb.Close()
		return nil, fmt.Errorf("cluster.redis: %s: %v%s", settings.Redact(cfg.Redis), err, accessHint(err, cfg))
	}
	return c, nil
}

// checkSchema writes the schema version into an empty prefix and refuses
// one holding another version.
func (c *Cluster) checkSchema(ctx context.Context) error {
	c.m.cmd("schema")
	if _, err := c.rdb.SetNX(ctx, c.k.schema(), SchemaVersion, 0).Result(); err != nil {
		return fmt.Errorf("writing the schema version: %v", err)
	}
	v, err := c.rdb.Get(ctx, c.k.schema()).Result()
	if err != nil {
		return fmt.Errorf("reading the schema version: %v", err)
	}
	if v != SchemaVersion {
		return fmt.Errorf("key prefix %q holds schema version %.40q, this netproxy speaks %q; use another cluster.key_prefix or migrate", c.cfg.KeyPrefix, v, SchemaVersion)
	}
	return nil
}

// NodeID is this replica's id.
func (c *Cluster) NodeID() string { return c.node }

// Up reports whether Redis answered the last call.
func (c *Cluster) Up() bool { return c.up.Load() }

// Status is one line for /readyz.
func (c *Cluster) Status() string {
	if c.up.Load() {
		return fmt.Sprintf("cluster: up (node %s, position %s)", c.node, *c.pos.Load())
	}
	why := "not connected yet"
	if e := c.lastErr.Load(); e != nil {
		why = *e
	}
	return fmt.Sprintf("cluster: down (node %s): %s; new reviews are denied with approvals_unavailable", c.node, why)
}

// Attach hands the cluster the approval service (after both are built).
func (c *Cluster) Attach(r Reviews) { c.reviews.Store(&reviewsBox{r}) }

func (c *Cluster) reviewSink() Reviews {
	if b := c.reviews.Load(); b != nil {
		return b.r
	}
	return nil
}

// Start loads the shared state, publishes this replica's executions and
// follows the change stream until Close. A first load that finds data it
// cannot parse is refused (error); later ones skip and count bad entries.
func (c *Cluster) Start(ctx context.Context) error {
	if c.execs != nil {
		c.execs.OnChange(c.localChange)
		c.execs.SetMissResolver(c.readThroughToken)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	pos, err := c.resync(lctx, true)
	cancel()
	if err != nil {
		return fmt.Errorf("cluster.redis: %s: %v", settings.Redact(c.cfg.Redis), err)
	}
	c.setUp(true, nil)
	c.pos.Store(&pos)
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = stop
	c.bg.Add(3)
	go func() { defer c.bg.Done(); c.follow(rctx) }()
	go func() { defer c.bg.Done(); c.heartbeat(rctx) }()
	go func() { defer c.bg.Done(); c.drainOutbox(rctx) }()
	return nil
}

// Close stops following and closes the connection. This replica's
// executions are not removed: they expire with its heartbeat (a restart
// under the same node id keeps them).
func (c *Cluster) Close() {
	c.closeOne.Do(func() {
		if c.cancel != nil {
			c.cancel()
		}
		c.bg.Wait()
		c.rdb.Close()
	})
}

func (c *Cluster) setUp(up bool, err error) {
	was := c.up.Swap(up)
	c.m.setUp(up)
	if err != nil {
		s := err.Error()
		c.lastErr.Store(&s)
	}
	switch {
	case was && !up:
		c.log.Error("cluster store unreachable; new reviews are denied (approvals_unavailable) until it returns", "error", err)
	case !was && up:
		c.log.Info("cluster store reachable; state resynchronised", "node", c.node)
	}
}

// fail counts a failed Redis call of op and marks the store down when the
// failure is the connection's.
func (c *Cluster) fail(op string, err error) {
	c.m.errors.WithLabelValues(op).Inc()
	if isConnErr(err) {
		c.setUp(false, err)
	}
}

func isConnErr(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) && !strings.HasPrefix(re.Error(), "LOADING") {
		return false // a server error reply: the connection is fine
	}
	return true
}

// ---- executions ----

// localChange publishes executions registered or ended on this replica.
func (c *Cluster) localChange(kind string, e attribution.Execution) {
	if kind == attribution.ExecutionEnded {
		c.replay.endExec(e.ID) // a copy of its record written back is refused
	}
	c.mu.Lock()
	_, remote := c.adopted[e.ID]
	fromStream := c.ending[e.ID]
	if kind == attribution.ExecutionEnded {
		delete(c.adopted, e.ID)
		delete(c.ending, e.ID)
	}
	c.mu.Unlock()
	switch kind {
	case attribution.ExecutionStarted:
		if remote {
			return
		}
		key, ok := c.execs.TokenKey(e.ID)
		if !ok {
			return
		}
		rec := execRecord{Execution: e, TokenSHA256: fmt.Sprintf("%x", key), Node: c.node}
		c.publishNow(rec)
	case attribution.ExecutionEnded:
		if fromStream {
			return
		}
		id := e.ID
		c.enqueue(func(ctx context.Context) error { return c.publishExecEnd(ctx, id) })
	}
}

func (c *Cluster) enqueue(f func(context.Context) error) {
	select {
	case c.outbox <- f:
	default:
		c.m.errors.WithLabelValues("outbox_full").Inc() // the next resync republishes
	}
}

func (c *Cluster) drainOutbox(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-c.outbox:
			for {
				octx, cancel := context.WithTimeout(ctx, opTimeout)
				err := f(octx)
				cancel()
				if err == nil || ctx.Err() != nil {
					break
				}
				select { // retried until Redis answers; order is kept
				case <-ctx.Done():
					return
				case <-time.After(retryEvery):
				}
			}
		}
	}
}

func (c *Cluster) publishExec(ctx context.Context, rec execRecord) error {
	data, _ := json.Marshal(rec)
	c.mu.Lock()
	c.ownKeys[rec.Execution.ID] = rec.TokenSHA256
	c.mu.Unlock()
	c.m.cmd("exec_start")
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, c.k.execs(), rec.Execution.ID, c.seal.seal(c.k.execs(), rec.Execution.ID, data))
		// The token index the read-through of other replicas uses.
		p.HSet(ctx, c.k.tokens(), rec.TokenSHA256, c.seal.seal(c.k.tokens(), rec.TokenSHA256, []byte(rec.Execution.ID)))
		c.xadd(ctx, p, evExecStart, data)
		return nil
	})
	if err != nil {
		c.fail("exec_start", err)
	}
	return err
}

func (c *Cluster) publishExecEnd(ctx context.Context, id string) error {
	data, _ := json.Marshal(execEnd{ID: id})
	c.mu.Lock()
	digest, hasKey := c.ownKeys[id]
	delete(c.ownKeys, id)
	c.mu.Unlock()
	c.m.cmd("exec_end")
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, c.k.execs(), id)
		if hasKey {
			p.HDel(ctx, c.k.tokens(), digest)
		}
		c.dropPlaceholders(ctx, p, id)
		c.xadd(ctx, p, evExecEnd, data)
		return nil
	})
	if err != nil {
		c.fail("exec_end", err)
	}
	return err
}

func (c *Cluster) xadd(ctx context.Context, p redis.Cmdable, typ string, data []byte) {
	p.XAdd(ctx, &redis.XAddArgs{Stream: c.k.events(), MaxLen: streamMaxLen, Approx: true,
		Values: []any{"t", typ, "n", c.node, "d", c.streamValue(typ, data)}})
}

// streamValue is the sealed "d" field of a change of type typ from this
// replica.
func (c *Cluster) streamValue(typ string, data []byte) string {
	return c.seal.seal(c.k.events(), streamField(typ, c.node), data)
}

// openExec verifies and parses the execs hash entry of id.
func (c *Cluster) openExec(id, v string) (execRecord, [32]byte, error) {
	payload, err := c.seal.open(c.k.execs(), id, v)
	if err != nil {
		return execRecord{}, [32]byte{}, err
	}
	rec, key, err := parseExec(payload)
	if err == nil && rec.Execution.ID != id {
		err = errors.New("execution record stored under another id")
	}
	return rec, key, err
}

// adopt attributes an execution of another replica here.
func (c *Cluster) adopt(rec execRecord, key [32]byte) {
	if c.execs == nil || rec.Node == c.node {
		return
	}
	if _, ok := c.execs.Get(rec.Execution.ID); ok {
		return
	}
	if c.replay.isEnded(rec.Execution.ID) {
		c.reject(kindExecution, c.k.execs()+" "+rec.Execution.ID, errors.New("replayed: this execution has ended"))
		return
	}
	c.mu.Lock()
	c.adopted[rec.Execution.ID] = rec.Node
	c.mu.Unlock()
	if !c.execs.Adopt(rec.Execution, key) {
		c.mu.Lock()
		delete(c.adopted, rec.Execution.ID)
		c.mu.Unlock()
	}
}

// end ends an execution here because the cluster says it ended: the
// registry's Revoke closes its connections.
func (c *Cluster) end(id string) {
	if c.execs == nil {
		return
	}
	if _, ok := c.execs.Get(id); !ok {
		return
	}
	c.mu.Lock()
	c.ending[id] = true
	c.mu.Unlock()
	if !c.execs.Revoke(id) {
		c.mu.Lock()
		delete(c.ending, id)
		c.mu.Unlock()
	}
}

// chanDecision is one waiter of Await.
type chanDecision = chan approvalsvc.ClusterDecision
