package cluster

// Following the cluster: full resync on (re)connect, then the change stream
// from the stored position, heartbeats and the reaping of dead replicas.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/netproxy/netproxy/approvalsvc"
	"github.com/netproxy/netproxy/execcore/execpolicy"
	"github.com/netproxy/netproxy/hostpolicy"
)

// snapshot is the shared state, parsed whole before anything is applied.
type snapshot struct {
	execs  map[string]execRecord
	keys   map[string][32]byte
	amend  map[string]amendChange
	caches []cacheChange
	xamend []execAmend
}

// resync loads the whole shared state, applies it, republishes this
// replica's executions and returns the stream position to follow from: the
// stored one when the stream still holds it (nothing missed is skipped),
// else the stream's end. strict refuses any unparsable entry.
func (c *Cluster) resync(ctx context.Context, strict bool) (string, error) {
	if err := c.checkSchema(ctx); err != nil {
		return "", err
	}
	c.m.cmd("resync")
	last := "0-0"
	if xs, err := c.rdb.XRevRangeN(ctx, c.k.events(), "+", "-", 1).Result(); err != nil {
		return "", fmt.Errorf("reading the change stream: %w", err)
	} else if len(xs) == 1 {
		last = xs[0].ID
	}
	snap, bad, err := c.load(ctx)
	if err != nil {
		return "", err
	}
	if len(bad) > 0 {
		if strict {
			return "", fmt.Errorf("refusing data under prefix %q that this netproxy cannot parse: %v", c.cfg.KeyPrefix, errors.Join(bad...))
		}
		for _, e := range bad {
			c.m.errors.WithLabelValues("parse").Inc()
			c.log.Error("skipping a cluster entry that cannot be parsed", "error", e)
		}
	}
	c.apply(snap)
	// Republish this replica's own executions (they may have expired while
	// it was cut off).
	if c.execs != nil {
		for _, e := range c.execs.Active() {
			c.mu.Lock()
			_, remote := c.adopted[e.ID]
			c.mu.Unlock()
			if remote {
				continue
			}
			if key, ok := c.execs.TokenKey(e.ID); ok {
				if err := c.publishExec(ctx, execRecord{Execution: e, TokenSHA256: fmt.Sprintf("%x", key), Node: c.node}); err != nil {
					return "", err
				}
			}
		}
	}
	// Decisions this replica waits for that may have been missed.
	c.mu.Lock()
	ids := make([]string, 0, len(c.waiters))
	for id := range c.waiters {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		if d, ok, err := c.decision(ctx, id); err == nil && ok {
			c.deliver(d)
		}
	}
	pos := *c.pos.Load()
	if pos != "" {
		first, err := c.rdb.XRangeN(ctx, c.k.events(), "-", "+", 1).Result()
		if err == nil && len(first) == 1 && !idLess(pos, first[0].ID) {
			return pos, nil // replay what was missed
		}
	}
	return last, nil
}

// idLess compares stream ids "ms-seq".
func idLess(a, b string) bool {
	var am, as, bm, bs uint64
	fmt.Sscanf(a, "%d-%d", &am, &as)
	fmt.Sscanf(b, "%d-%d", &bm, &bs)
	return am < bm || am == bm && as < bs
}

func (c *Cluster) load(ctx context.Context) (snapshot, []error, error) {
	s := snapshot{execs: map[string]execRecord{}, keys: map[string][32]byte{}, amend: map[string]amendChange{}}
	var bad []error
	execs, err := c.rdb.HGetAll(ctx, c.k.execs()).Result()
	if err != nil {
		return s, nil, fmt.Errorf("reading executions: %w", err)
	}
	for id, data := range execs {
		rec, key, err := c.openExec(id, data)
		if err != nil {
			c.reject(kindExecution, c.k.execs()+" "+id, err)
			continue
		}
		s.execs[id], s.keys[id] = rec, key
	}
	amend, err := c.rdb.HGetAll(ctx, c.k.amend()).Result()
	if err != nil {
		return s, nil, fmt.Errorf("reading amendments: %w", err)
	}
	for host, v := range amend {
		payload, err := c.seal.open(c.k.amend(), host, v)
		if err != nil {
			c.reject(kindAmendment, c.k.amend()+" "+host, err)
			continue
		}
		a, err := parseAmend(host, payload)
		if err != nil {
			bad = append(bad, fmt.Errorf("%s field %q: %v", c.k.amend(), host, err))
			continue
		}
		s.amend[host] = a
	}
	xamend, err := c.rdb.HGetAll(ctx, c.k.xamend()).Result()
	if err != nil {
		return s, nil, fmt.Errorf("reading exec amendments: %w", err)
	}
	s.xamend = c.loadExecAmends(xamend)
	iter := c.rdb.Scan(ctx, 0, c.k.cachePattern(), 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		sess := key[len(c.k.cache("")):]
		entries, err := c.rdb.HGetAll(ctx, key).Result()
		if err != nil {
			return s, nil, fmt.Errorf("reading session caches: %w", err)
		}
		for field, v := range entries {
			payload, err := c.seal.open(key, field, v)
			if err != nil {
				c.reject(kindCache, key, err)
				continue
			}
			rk, err := parseReviewField(sess, field)
			var cv cacheValue
			if err == nil {
				cv, err = parseCacheValue(payload)
			}
			if err != nil {
				bad = append(bad, fmt.Errorf("%s field %.80q: %v", key, field, err))
				continue
			}
			s.caches = append(s.caches, cacheChange{Key: rk, Outcome: cv.Outcome, Seq: cv.Seq})
		}
	}
	if err := iter.Err(); err != nil {
		return s, nil, fmt.Errorf("listing session caches: %w", err)
	}
	return s, bad, nil
}

func (c *Cluster) apply(s snapshot) {
	for id, rec := range s.execs {
		c.adopt(rec, s.keys[id])
	}
	// Executions of other replicas that are no longer shared have ended —
	// when their replica is dead. A live replica announces its ends on the
	// stream (sealed); a record merely deleted from Redis is not an end
	// (the origin republishes it, see sweepOwnExecs).
	c.mu.Lock()
	var gone []string
	now := time.Now()
	for id, node := range c.adopted {
		if _, ok := s.execs[id]; !ok && now.Sub(time.UnixMilli(c.beats[node])) > nodeTTL {
			gone = append(gone, id)
		}
	}
	c.mu.Unlock()
	for _, id := range gone {
		c.end(id)
	}
	for _, a := range s.amend {
		if !c.replay.accept(amendItem(a.Host), a.Seq) {
			c.reject(kindAmendment, c.k.amend()+" "+a.Host, errReplayed)
			continue
		}
		c.applyAmend(a)
	}
	for _, ch := range s.caches {
		c.applyCache(ch, c.k.cache(ch.Key.Session))
	}
	for _, a := range s.xamend {
		c.acceptExecAmend(a, c.k.xamend()+" "+execAmendField(a.Tokens))
	}
}

var errReplayed = errors.New("replayed: older than a version this replica has accepted")

// applyCache hands a session cache outcome to the approval service unless
// it is older than one already accepted for the entry.
func (c *Cluster) applyCache(ch cacheChange, where string) {
	if !c.replay.accept(cacheItem(ch.Key.Session, reviewField(ch.Key)), ch.Seq) {
		c.reject(kindCache, where, errReplayed)
		return
	}
	if r := c.reviewSink(); r != nil {
		r.ApplyClusterCache(ch.Key, ch.Outcome)
	}
}

// applyAmend applies an amendment to the live lists and mirrors it into
// this replica's rules file (which never holds a line twice), so the file
// shows what the cluster enforces.
func (c *Cluster) applyAmend(a amendChange) {
	v := hostpolicy.Allow
	if a.Verdict == "deny" {
		v = hostpolicy.Deny
	}
	if c.amender != nil {
		c.amender.Amend(a.Host, v)
	}
	if c.rules == nil {
		return
	}
	word := "Allow"
	if v == hostpolicy.Deny {
		word = "Deny"
	}
	proto := ruleProtocol(a.Protocol)
	if _, err := c.rules.AppendNetworkRule(execpolicy.NetworkRule{Host: a.Host, Protocol: proto, Decision: string(v),
		Justification: fmt.Sprintf("%s %s access to %s", word, proto, a.Host)}); err != nil {
		c.log.Error("mirroring a cluster amendment into the rules file failed; the live list has it", "host", a.Host, "error", err)
	}
}

// follow reads the change stream; on any connection error it marks the
// store down and, once Redis answers again, resyncs before reading on.
func (c *Cluster) follow(ctx context.Context) {
	resync := false
	for ctx.Err() == nil {
		if resync {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			pos, err := c.resync(rctx, false)
			cancel()
			if err != nil {
				c.fail("resync", err)
				sleep(ctx, retryEvery)
				continue
			}
			c.pos.Store(&pos)
			c.setUp(true, nil)
			resync = false
		}
		c.m.cmd("stream_read")
		res, err := c.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{c.k.events(), *c.pos.Load()}, Count: 512, Block: 2 * time.Second}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.fail("stream_read", err)
			if isConnErr(err) {
				resync = true
			}
			sleep(ctx, retryEvery)
			continue
		}
		c.setUp(true, nil)
		for _, st := range res {
			for _, msg := range st.Messages {
				c.applyChange(msg)
				id := msg.ID
				c.pos.Store(&id)
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// applyChange applies one stream entry; an entry that does not parse is
// skipped whole and counted.
func (c *Cluster) applyChange(msg redis.XMessage) {
	typ, _ := msg.Values["t"].(string)
	origin, _ := msg.Values["n"].(string)
	sealed, _ := msg.Values["d"].(string)
	payload, err := c.seal.open(c.k.events(), streamField(typ, origin), sealed)
	if err != nil {
		c.reject(kindChange, c.k.events()+" "+msg.ID, err)
		return
	}
	data := payload
	self := origin == c.node
	bad := func(err error) {
		c.m.errors.WithLabelValues("parse").Inc()
		c.log.Error("skipping a change that cannot be parsed", "id", msg.ID, "type", typ, "error", err)
	}
	switch typ {
	case evExecStart:
		rec, key, err := parseExec(data)
		if err != nil {
			bad(err)
			return
		}
		if !self {
			c.adopt(rec, key)
		}
	case evExecEnd:
		var e execEnd
		if err := json.Unmarshal(data, &e); err != nil || e.ID == "" {
			bad(fmt.Errorf("exec_end: %v", err))
			return
		}
		c.end(e.ID)
	case evAmend:
		var a amendChange
		if err := json.Unmarshal(data, &a); err != nil || a.Host == "" || (a.Verdict != "allow" && a.Verdict != "deny") {
			bad(fmt.Errorf("amend: %v", err))
			return
		}
		if !c.replay.accept(amendItem(a.Host), a.Seq) {
			c.reject(kindAmendment, c.k.events()+" "+msg.ID, errReplayed)
			return
		}
		c.applyAmend(a)
	case evExecAmend:
		a, err := parseExecAmend("", data)
		if err != nil {
			bad(err)
			return
		}
		c.acceptExecAmend(a, c.k.events()+" "+msg.ID)
	case evCache:
		var ch cacheChange
		if err := json.Unmarshal(data, &ch); err != nil || (ch.Key.Host == "") == !ch.Key.Exec() || cacheOutcome(ch.Outcome) == "" {
			bad(fmt.Errorf("cache: %v", err))
			return
		}
		c.applyCache(ch, c.k.events()+" "+msg.ID)
	case evCreated:
		var a approvalsvc.Approval
		if err := json.Unmarshal(data, &a); err != nil || a.ID == "" {
			bad(fmt.Errorf("created: %v", err))
			return
		}
		if c.replay.isDecided(a.ID) {
			c.reject(kindPending, c.k.events()+" "+msg.ID, errors.New("replayed: this review was decided"))
			return
		}
		if r := c.reviewSink(); r != nil && !self {
			r.ApplyClusterCreated(a)
		}
	case evDecided:
		var d approvalsvc.ClusterDecision
		if err := json.Unmarshal(data, &d); err != nil || d.ID == "" {
			bad(fmt.Errorf("decided: %v", err))
			return
		}
		c.replay.decide(d.ID)
		c.deliver(d)
		// This replica's own decisions reached its page when it took them.
		if r := c.reviewSink(); r != nil && !self {
			r.ApplyClusterDecision(d)
		}
	default:
		bad(fmt.Errorf("unknown change type %.20q", typ))
	}
}

// heartbeat writes this replica's heartbeat and position every second,
// ends the executions of dead replicas, and times out reviews whose
// replica died.
func (c *Cluster) heartbeat(ctx context.Context) {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	n := 0
	for {
		hctx, cancel := context.WithTimeout(ctx, opTimeout)
		c.beat(hctx, n%5 == 0)
		cancel()
		n++
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Cluster) beat(ctx context.Context, sweep bool) {
	now := time.Now()
	info, _ := json.Marshal(nodeInfo{Heartbeat: now.UnixMilli(), Started: c.started.UnixMilli(), Position: *c.pos.Load()})
	c.m.cmd("heartbeat")
	if err := c.rdb.HSet(ctx, c.k.nodes(), c.node, c.seal.seal(c.k.nodes(), c.node, info)).Err(); err != nil {
		c.fail("heartbeat", err)
		return
	}
	if !c.up.Load() {
		return // the follower resyncs first
	}
	c.m.cmd("reap")
	nodes, err := c.rdb.HGetAll(ctx, c.k.nodes()).Result()
	if err != nil {
		c.fail("reap", err)
		return
	}
	dead := map[string]bool{}
	for id, data := range nodes {
		// A heartbeat that fails verification is ignored: the node's last
		// verified one decides whether it is alive (so neither a forged
		// beat keeps a dead replica alive nor a garbled one kills a live
		// replica's executions).
		var ni nodeInfo
		payload, err := c.seal.open(c.k.nodes(), id, data)
		if err != nil {
			c.reject(kindHeartbeat, c.k.nodes()+" "+id, err)
		} else if json.Unmarshal(payload, &ni) != nil {
			continue
		}
		c.mu.Lock()
		if ni.Heartbeat > c.beats[id] {
			c.beats[id] = ni.Heartbeat
		}
		last := c.beats[id]
		c.mu.Unlock()
		if last == 0 {
			continue
		}
		age := now.Sub(time.UnixMilli(last))
		if id != c.node && age > nodeTTL {
			dead[id] = true
			if age > forgetNodeAfter {
				c.rdb.HDel(ctx, c.k.nodes(), id)
			}
		}
	}
	c.m.nodes.Set(float64(len(nodes) - len(dead)))
	if len(dead) > 0 {
		c.reapExecs(ctx, dead)
	}
	if sweep {
		c.sweepPending(ctx, now)
		c.sweepOwnExecs(ctx)
		c.replay.prune(now)
	}
}

// reapExecs ends the executions of dead replicas: whoever removes one
// first announces its end.
func (c *Cluster) reapExecs(ctx context.Context, dead map[string]bool) {
	execs, err := c.rdb.HGetAll(ctx, c.k.execs()).Result()
	if err != nil {
		c.fail("reap", err)
		return
	}
	reaped := map[string]bool{}
	defer func() {
		if len(reaped) > 0 {
			c.reapPlaceholders(ctx, reaped)
		}
	}()
	for id, data := range execs {
		rec, _, err := c.openExec(id, data)
		if err != nil || !dead[rec.Node] {
			continue
		}
		if n, err := c.rdb.HDel(ctx, c.k.execs(), id).Result(); err == nil && n == 1 {
			reaped[id] = true
			c.rdb.HDel(ctx, c.k.tokens(), rec.TokenSHA256)
			d, _ := json.Marshal(execEnd{ID: id})
			c.xadd(ctx, c.rdb, evExecEnd, d)
			c.log.Info("execution of a dead replica expired", "execution_id", id, "node", rec.Node)
		}
	}
}

// sweepPending times out pending reviews past their deadline whose replica
// did not (it died): they must not stay listed forever.
func (c *Cluster) sweepPending(ctx context.Context, now time.Time) {
	c.m.cmd("sweep")
	all, err := c.rdb.HGetAll(ctx, c.k.pending()).Result()
	if err != nil {
		c.fail("sweep", err)
		return
	}
	for id, data := range all {
		p, err := c.openPending(id, data)
		if err != nil {
			continue
		}
		if now.Sub(time.UnixMilli(p.Deadline)) > 5*time.Second {
			c.Decide(ctx, approvalsvc.ClusterDecision{ID: id, Key: p.Key, Outcome: approvalsvc.OutcomeTimeout, Reviewer: "user",
				Rationale: "no decision before the review's deadline"}, false)
		}
	}
}

// sweepOwnExecs keeps the shared executions of this replica true to its
// registry: a record of one of its ended executions written back is removed
// and its end announced again; a record of a live one that was deleted or
// garbled is republished.
func (c *Cluster) sweepOwnExecs(ctx context.Context) {
	if c.execs == nil {
		return
	}
	c.m.cmd("sweep_execs")
	all, err := c.rdb.HGetAll(ctx, c.k.execs()).Result()
	if err != nil {
		c.fail("sweep_execs", err)
		return
	}
	for id, data := range all {
		rec, _, err := c.openExec(id, data)
		if err != nil || rec.Node != c.node || !c.replay.isEnded(id) {
			continue
		}
		if _, live := c.execs.Get(id); live {
			continue
		}
		c.reject(kindExecution, c.k.execs()+" "+id, errors.New("replayed: this replica ended the execution"))
		if err := c.publishExecEnd(ctx, id); err != nil {
			return
		}
	}
	for _, e := range c.execs.Active() {
		c.mu.Lock()
		_, remote := c.adopted[e.ID]
		c.mu.Unlock()
		if remote {
			continue
		}
		if _, _, err := c.openExec(e.ID, all[e.ID]); err == nil {
			continue
		}
		if key, ok := c.execs.TokenKey(e.ID); ok {
			if err := c.publishExec(ctx, execRecord{Execution: e, TokenSHA256: fmt.Sprintf("%x", key), Node: c.node}); err != nil {
				return
			}
		}
	}
}
