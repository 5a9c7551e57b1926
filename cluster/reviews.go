package cluster

// The approvalsvc.Coordinator side: one review per key cluster-wide, the
// shared pending list and decisions.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/netproxy/netproxy/approvalsvc"
)

// beginScript: a stored session-wide outcome, else (network) an amendment
// for the host, else join the open review, else — within the cluster's
// pending bounds — open one, all atomically. Stored records are returned
// sealed: the caller verifies them (Redis is not trusted to say what they
// mean); with ARGV[5] = '1' stored outcomes are skipped (the caller found
// them forged or replayed).
//
// The bounds (SPEC §5, approvals.max_pending and max_pending_per_session,
// across replicas): every open review holds a slot in P slots and
// P slots:<session> scored with its lease's end on Redis's clock, so the
// slots of a replica that died free themselves when its reviews would have
// timed out; the decision removes them.
//
// KEYS: cache hash, amend hash, review key, slots, session slots. ARGV:
// field, host (empty for an exec review), sealed value, lease ms, skip stored,
// approval id, max pending (0: none), max per session (0: none).
var beginScript = redis.NewScript(`
if ARGV[5] ~= '1' then
  local c = redis.call('HGET', KEYS[1], ARGV[1])
  if c then return {'cache', c} end
  if ARGV[2] ~= '' then
    local a = redis.call('HGET', KEYS[2], ARGV[2])
    if a then return {'amend', a} end
  end
end
local v = redis.call('GET', KEYS[3])
if v then return {'join', v} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
local n = redis.call('ZCARD', KEYS[4])
if tonumber(ARGV[7]) > 0 and n >= tonumber(ARGV[7]) then return {'full', 'total|' .. n} end
local m = redis.call('ZCARD', KEYS[5])
if tonumber(ARGV[8]) > 0 and m >= tonumber(ARGV[8]) then return {'full', 'session|' .. m} end
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4])
local exp = now + tonumber(ARGV[4])
redis.call('ZADD', KEYS[4], exp, ARGV[6])
redis.call('ZADD', KEYS[5], exp, ARGV[6])
redis.call('PEXPIRE', KEYS[5], ARGV[4])
return {'lead', ARGV[3]}
`)

// decideScript records a decision once: it takes the review off the
// pending list (or, forced, records it anyway), stores the decision, closes
// the review key, writes the session cache and the amendment, and appends
// the changes to the stream — all or nothing.
//
// KEYS: pending, decision, review, cache hash, amend hash (P amend for a
// network review, P xamend for an exec review), stream, slots, session
// slots. ARGV: id, sealed decision, force, field, sealed cache value, amend
// field, sealed amend value, node, stream maxlen, sealed cache change,
// sealed amend change, decision ttl s, cache ttl s, sealed decided change,
// amend change type. Everything is sealed by the caller; the script only
// stores.
var decideScript = redis.NewScript(`
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  local d = redis.call('GET', KEYS[2])
  if d then return {'held', d} end
  if ARGV[3] ~= '1' then return {'missing', ''} end
end
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[12])
redis.call('ZREM', KEYS[7], ARGV[1])
redis.call('ZREM', KEYS[8], ARGV[1])
local v = redis.call('GET', KEYS[3])
if v then
  local dot = string.find(v, '.', 1, true)
  if dot and string.sub(v, dot + 1, dot + string.len(ARGV[1]) + 1) == ARGV[1] .. '|' then redis.call('DEL', KEYS[3]) end
end
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[4], ARGV[4], ARGV[5])
  redis.call('EXPIRE', KEYS[4], ARGV[13])
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[9], '*', 't', 'cache', 'n', ARGV[8], 'd', ARGV[10])
end
if ARGV[7] ~= '' then
  redis.call('HSET', KEYS[5], ARGV[6], ARGV[7])
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[9], '*', 't', ARGV[15], 'n', ARGV[8], 'd', ARGV[11])
end
redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[9], '*', 't', 'decided', 'n', ARGV[8], 'd', ARGV[14])
return {'ok', ''}
`)

// Begin implements approvalsvc.Coordinator. It is the only Redis call a
// request makes, and only on a local cache miss.
func (c *Cluster) Begin(ctx context.Context, k approvalsvc.ReviewKey, id string, deadline time.Time) (approvalsvc.Begin, error) {
	if !c.up.Load() {
		c.m.unavailable.Inc()
		return approvalsvc.Begin{}, approvalsvc.ErrUnavailable
	}
	rkey := c.k.review(k)
	value := c.seal.seal(rkey, "", []byte(id+"|"+strconv.FormatInt(deadline.UnixMilli(), 10)))
	lease := time.Until(deadline) + 5*time.Second
	maxTotal, maxSession := c.pendingBounds()
	skip := "0"
	for try := 0; try < 3; try++ {
		c.m.cmd("begin")
		res, err := beginScript.Run(ctx, c.rdb, []string{c.k.cache(k.Session), c.k.amend(), rkey, c.k.slots(), c.k.sessionSlots(k.Session)},
			reviewField(k), k.Host, value, lease.Milliseconds(), skip, id, maxTotal, maxSession).StringSlice()
		if err != nil {
			c.fail("begin", err)
			c.m.unavailable.Inc()
			return approvalsvc.Begin{}, fmt.Errorf("%w: %v", approvalsvc.ErrUnavailable, err)
		}
		if len(res) != 2 {
			c.m.errors.WithLabelValues("begin").Inc()
			return approvalsvc.Begin{}, fmt.Errorf("%w: unexpected reply from Redis", approvalsvc.ErrUnavailable)
		}
		switch res[0] {
		case "cache", "amend":
			if outcome, ok := c.storedOutcome(k, res[0], res[1]); ok {
				return approvalsvc.Begin{Kind: approvalsvc.BeginCached, Outcome: outcome}, nil
			}
			skip = "1" // forged or replayed: a review decides instead
		case "lead":
			return approvalsvc.Begin{Kind: approvalsvc.BeginLead, ID: id, Deadline: deadline}, nil
		case "full":
			return approvalsvc.Begin{Kind: approvalsvc.BeginOverloaded, Why: overloadWhy(res[1])}, nil
		case "join":
			jid, jdeadline, err := c.openReview(rkey, res[1])
			if err != nil {
				// A forged review would hold the request until a deadline
				// Redis chose: refuse to join it (the key stays until its
				// lease ends; this request fails closed).
				c.reject(kindReview, rkey, err)
				return approvalsvc.Begin{}, fmt.Errorf("%w: the open review for this request fails verification", approvalsvc.ErrUnavailable)
			}
			return approvalsvc.Begin{Kind: approvalsvc.BeginJoin, ID: jid, Deadline: jdeadline}, nil
		}
	}
	return approvalsvc.Begin{}, fmt.Errorf("%w: the review key kept changing", approvalsvc.ErrUnavailable)
}

// storedOutcome verifies a session cache entry or an amendment Begin
// found for k and returns the outcome it stands for.
func (c *Cluster) storedOutcome(k approvalsvc.ReviewKey, kind, v string) (string, bool) {
	if kind == "cache" {
		rkey, field := c.k.cache(k.Session), reviewField(k)
		payload, err := c.seal.open(rkey, field, v)
		var cv cacheValue
		if err == nil {
			cv, err = parseCacheValue(payload)
		}
		if err == nil && !c.replay.accept(cacheItem(k.Session, field), cv.Seq) {
			err = errReplayed
		}
		if err != nil {
			c.reject(kindCache, rkey, err)
			return "", false
		}
		return cv.Outcome, true
	}
	payload, err := c.seal.open(c.k.amend(), k.Host, v)
	var a amendChange
	if err == nil {
		a, err = parseAmend(k.Host, payload)
	}
	if err == nil && !c.replay.accept(amendItem(k.Host), a.Seq) {
		err = errReplayed
	}
	if err != nil {
		c.reject(kindAmendment, c.k.amend()+" "+k.Host, err)
		return "", false
	}
	if a.Verdict == "allow" {
		return approvalsvc.OutcomeAllowAlways, true
	}
	return approvalsvc.OutcomeDenyAlways, true
}

// openReview verifies an open review's key value: "<id>|<deadline ms>".
func (c *Cluster) openReview(rkey, v string) (string, time.Time, error) {
	payload, err := c.seal.open(rkey, "", v)
	if err != nil {
		return "", time.Time{}, err
	}
	jid, ms, ok := strings.Cut(string(payload), "|")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || jid == "" {
		return "", time.Time{}, errors.New("review value is not id|deadline")
	}
	return jid, time.UnixMilli(n), nil
}

// openPending verifies and parses a pending hash entry; a review this
// replica saw decided is refused (a replayed record would reopen it).
func (c *Cluster) openPending(id, v string) (pendingRecord, error) {
	var p pendingRecord
	payload, err := c.seal.open(c.k.pending(), id, v)
	if err == nil {
		if err = json.Unmarshal(payload, &p); err == nil && p.Approval.ID != id {
			err = errors.New("pending record stored under another id")
		}
	}
	if err == nil && c.replay.isDecided(id) {
		err = errors.New("replayed: this review was decided")
	}
	if err != nil {
		c.reject(kindPending, c.k.pending()+" "+id, err)
	}
	return p, err
}

// Open implements approvalsvc.Coordinator: the review is listed for every
// replica's page and decidable from any of them.
func (c *Cluster) Open(ctx context.Context, a approvalsvc.Approval, k approvalsvc.ReviewKey) error {
	deadline := time.Now()
	rkey := c.k.review(k)
	if v, err := c.rdb.Get(ctx, rkey).Result(); err == nil {
		if _, d, err := c.openReview(rkey, v); err == nil {
			deadline = d
		}
	}
	rec, _ := json.Marshal(pendingRecord{Approval: a, Key: k, Node: c.node, Deadline: deadline.UnixMilli()})
	data, _ := json.Marshal(a)
	c.m.cmd("open")
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, c.k.pending(), a.ID, c.seal.seal(c.k.pending(), a.ID, rec))
		c.xadd(ctx, p, evCreated, data)
		return nil
	})
	if err != nil {
		c.fail("open", err)
	}
	return err
}

// Decide implements approvalsvc.Coordinator.
func (c *Cluster) Decide(ctx context.Context, d approvalsvc.ClusterDecision, force bool) (approvalsvc.ClusterDecision, bool, error) {
	data, err := json.Marshal(d)
	if err != nil {
		return d, false, err
	}
	field, cacheOut := reviewField(d.Key), cacheOutcome(d.Outcome)
	amend := amendChange{Host: d.Key.Host, Verdict: amendVerdict(d.Outcome), Protocol: d.Key.Protocol}
	var xamend execAmend
	if d.Key.Exec() {
		// An exec review amends no host list; its allow_always may add a
		// prefix rule.
		amend.Verdict = ""
		if d.Outcome == approvalsvc.OutcomeAllowAlways {
			xamend.Tokens = d.Amendment
		}
	}
	var seq uint64
	if cacheOut != "" || amend.Verdict != "" || len(xamend.Tokens) > 0 {
		// Versioned records: a copy of an older one written back is refused.
		if seq, err = c.nextSeq(ctx); err != nil {
			return d, false, err
		}
	}
	amend.Seq = seq
	cacheKey := c.k.cache(d.Key.Session)
	cacheVal, cacheChg, amendVal, amendChg := "", "", "", ""
	if cacheOut != "" {
		v, _ := json.Marshal(cacheValue{Outcome: cacheOut, Seq: seq})
		ch, _ := json.Marshal(cacheChange{Key: d.Key, Outcome: cacheOut, Seq: seq})
		cacheVal, cacheChg = c.seal.seal(cacheKey, field, v), c.streamValue(evCache, ch)
	}
	amendKey, amendField, amendType := c.k.amend(), d.Key.Host, evAmend
	switch {
	case amend.Verdict != "":
		v, _ := json.Marshal(amend)
		amendVal, amendChg = c.seal.seal(c.k.amend(), d.Key.Host, v), c.streamValue(evAmend, v)
	case len(xamend.Tokens) > 0:
		xamend.Seq = seq
		v, _ := json.Marshal(xamend)
		amendKey, amendField, amendType = c.k.xamend(), execAmendField(xamend.Tokens), evExecAmend
		amendVal, amendChg = c.seal.seal(amendKey, amendField, v), c.streamValue(evExecAmend, v)
	}
	f := "0"
	if force {
		f = "1"
	}
	c.m.cmd("decide")
	res, err := decideScript.Run(ctx, c.rdb,
		[]string{c.k.pending(), c.k.decision(d.ID), c.k.review(d.Key), cacheKey, amendKey, c.k.events(), c.k.slots(), c.k.sessionSlots(d.Key.Session)},
		d.ID, c.seal.seal(c.k.decision(d.ID), "", data), f, field, cacheVal, amendField, amendVal, c.node, streamMaxLen, cacheChg, amendChg,
		int(decisionTTL.Seconds()), int(cacheTTL.Seconds()), c.streamValue(evDecided, data), amendType).StringSlice()
	if err != nil {
		c.fail("decide", err)
		return d, false, err
	}
	if len(res) != 2 {
		return d, false, errors.New("unexpected reply from Redis")
	}
	switch res[0] {
	case "ok":
		c.replay.decide(d.ID)
		return d, true, nil
	case "held":
		held, err := c.openDecision(d.ID, res[1])
		if err != nil {
			return d, false, fmt.Errorf("stored decision: %v", err)
		}
		return held, false, nil
	}
	return approvalsvc.ClusterDecision{}, false, nil
}

// Await implements approvalsvc.Coordinator: the decision arrives on the
// change stream (or is already stored).
func (c *Cluster) Await(ctx context.Context, id string) (approvalsvc.ClusterDecision, error) {
	ch := make(chan approvalsvc.ClusterDecision, 1)
	c.mu.Lock()
	c.waiters[id] = append(c.waiters[id], ch)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		list := c.waiters[id]
		for i, w := range list {
			if w == ch {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(c.waiters, id)
		} else {
			c.waiters[id] = list
		}
		c.mu.Unlock()
	}()
	if d, ok, err := c.decision(ctx, id); err == nil && ok {
		return d, nil
	}
	select {
	case d := <-ch:
		return d, nil
	case <-ctx.Done():
		return approvalsvc.ClusterDecision{}, ctx.Err()
	}
}

func (c *Cluster) decision(ctx context.Context, id string) (approvalsvc.ClusterDecision, bool, error) {
	c.m.cmd("decision")
	v, err := c.rdb.Get(ctx, c.k.decision(id)).Result()
	if errors.Is(err, redis.Nil) {
		return approvalsvc.ClusterDecision{}, false, nil
	}
	if err != nil {
		c.fail("decision", err)
		return approvalsvc.ClusterDecision{}, false, err
	}
	d, err := c.openDecision(id, v)
	if err != nil {
		return d, false, err
	}
	return d, true, nil
}

// openDecision verifies and parses the stored decision of review id.
func (c *Cluster) openDecision(id, v string) (approvalsvc.ClusterDecision, error) {
	var d approvalsvc.ClusterDecision
	rkey := c.k.decision(id)
	payload, err := c.seal.open(rkey, "", v)
	if err != nil {
		c.reject(kindDecision, rkey, err)
		return d, err
	}
	if err := json.Unmarshal(payload, &d); err != nil || d.ID != id {
		c.m.errors.WithLabelValues("parse").Inc()
		return d, fmt.Errorf("stored decision for %s cannot be parsed", id)
	}
	c.replay.decide(id)
	return d, nil
}

// deliver hands a decision to this replica's waiters.
func (c *Cluster) deliver(d approvalsvc.ClusterDecision) {
	c.mu.Lock()
	list := c.waiters[d.ID]
	c.mu.Unlock()
	for _, ch := range list {
		select {
		case ch <- d:
		default:
		}
	}
}

// Pending implements approvalsvc.Coordinator.
func (c *Cluster) Pending(ctx context.Context) ([]approvalsvc.Approval, error) {
	c.m.cmd("pending")
	all, err := c.rdb.HGetAll(ctx, c.k.pending()).Result()
	if err != nil {
		c.fail("pending", err)
		return nil, err
	}
	out := make([]approvalsvc.Approval, 0, len(all))
	for id, data := range all {
		p, err := c.openPending(id, data)
		if err != nil {
			continue
		}
		out = append(out, p.Approval)
	}
	return out, nil
}

// PendingGet implements approvalsvc.Coordinator.
func (c *Cluster) PendingGet(ctx context.Context, id string) (approvalsvc.Approval, approvalsvc.ReviewKey, bool, error) {
	c.m.cmd("pending")
	data, err := c.rdb.HGet(ctx, c.k.pending(), id).Result()
	if errors.Is(err, redis.Nil) {
		return approvalsvc.Approval{}, approvalsvc.ReviewKey{}, false, nil
	}
	if err != nil {
		c.fail("pending", err)
		return approvalsvc.Approval{}, approvalsvc.ReviewKey{}, false, err
	}
	p, err := c.openPending(id, data)
	if err != nil {
		return approvalsvc.Approval{}, approvalsvc.ReviewKey{}, false, nil
	}
	return p.Approval, p.Key, true, nil
}
