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

// beginScript: a stored session-wide outcome, else an amendment for the
// host, else join the open review, else open one (atomically).
//
// KEYS: cache hash, amend hash, review key. ARGV: field, host, value, lease ms.
var beginScript = redis.NewScript(`
local c = redis.call('HGET', KEYS[1], ARGV[1])
if c then return {'cached', c} end
local a = redis.call('HGET', KEYS[2], ARGV[2])
if a then
  if string.sub(a, 1, 6) == 'allow ' then return {'cached', 'allow_always'} end
  if string.sub(a, 1, 5) == 'deny ' then return {'cached', 'deny_always'} end
end
if redis.call('SET', KEYS[3], ARGV[3], 'NX', 'PX', ARGV[4]) then return {'lead', ARGV[3]} end
local v = redis.call('GET', KEYS[3])
if v then return {'join', v} end
return {'retry', ''}
`)

// decideScript records a decision once: it takes the review off the
// pending list (or, forced, records it anyway), stores the decision, closes
// the review key, writes the session cache and the amendment, and appends
// the changes to the stream — all or nothing.
//
// KEYS: pending, decision, review, cache hash, amend hash, stream.
// ARGV: id, decision JSON, force, field, cache outcome, host, amend value,
// node, stream maxlen, cache change JSON, amend change JSON, decision ttl s,
// cache ttl s.
var decideScript = redis.NewScript(`
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  local d = redis.call('GET', KEYS[2])
  if d then return {'held', d} end
  if ARGV[3] ~= '1' then return {'missing', ''} end
end
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[12])
local v = redis.call('GET', KEYS[3])
if v and string.sub(v, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. '|' then redis.call('DEL', KEYS[3]) end
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[4], ARGV[4], ARGV[5])
  redis.call('EXPIRE', KEYS[4], ARGV[13])
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[9], '*', 't', 'cache', 'n', ARGV[8], 'd', ARGV[10])
end
if ARGV[7] ~= '' then
  redis.call('HSET', KEYS[5], ARGV[6], ARGV[7])
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[9], '*', 't', 'amend', 'n', ARGV[8], 'd', ARGV[11])
end
redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[9], '*', 't', 'decided', 'n', ARGV[8], 'd', ARGV[2])
return {'ok', ARGV[2]}
`)

// Begin implements approvalsvc.Coordinator. It is the only Redis call a
// request makes, and only on a local cache miss.
func (c *Cluster) Begin(ctx context.Context, k approvalsvc.ReviewKey, id string, deadline time.Time) (approvalsvc.Begin, error) {
	if !c.up.Load() {
		c.m.unavailable.Inc()
		return approvalsvc.Begin{}, approvalsvc.ErrUnavailable
	}
	value := id + "|" + strconv.FormatInt(deadline.UnixMilli(), 10)
	lease := time.Until(deadline) + 5*time.Second
	for try := 0; try < 3; try++ {
		c.m.cmd("begin")
		res, err := beginScript.Run(ctx, c.rdb, []string{c.k.cache(k.Session), c.k.amend(), c.k.review(k)},
			reviewField(k), k.Host, value, lease.Milliseconds()).StringSlice()
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
		case "cached":
			if cacheOutcome(res[1]) == "" {
				return approvalsvc.Begin{}, fmt.Errorf("%w: stored outcome %.20q is not understood", approvalsvc.ErrUnavailable, res[1])
			}
			return approvalsvc.Begin{Kind: approvalsvc.BeginCached, Outcome: res[1]}, nil
		case "lead":
			return approvalsvc.Begin{Kind: approvalsvc.BeginLead, ID: id, Deadline: deadline}, nil
		case "join":
			jid, ms, ok := strings.Cut(res[1], "|")
			n, err := strconv.ParseInt(ms, 10, 64)
			if !ok || err != nil || jid == "" {
				return approvalsvc.Begin{}, fmt.Errorf("%w: review key holds %.40q", approvalsvc.ErrUnavailable, res[1])
			}
			return approvalsvc.Begin{Kind: approvalsvc.BeginJoin, ID: jid, Deadline: time.UnixMilli(n)}, nil
		}
	}
	return approvalsvc.Begin{}, fmt.Errorf("%w: the review key kept changing", approvalsvc.ErrUnavailable)
}

// Open implements approvalsvc.Coordinator: the review is listed for every
// replica's page and decidable from any of them.
func (c *Cluster) Open(ctx context.Context, a approvalsvc.Approval, k approvalsvc.ReviewKey) error {
	deadline := time.Now()
	if v, err := c.rdb.Get(ctx, c.k.review(k)).Result(); err == nil {
		if _, ms, ok := strings.Cut(v, "|"); ok {
			if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
				deadline = time.UnixMilli(n)
			}
		}
	}
	rec, _ := json.Marshal(pendingRecord{Approval: a, Key: k, Node: c.node, Deadline: deadline.UnixMilli()})
	data, _ := json.Marshal(a)
	c.m.cmd("open")
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, c.k.pending(), a.ID, rec)
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
	amendVal := ""
	if amend.Verdict != "" {
		amendVal = amendValue(amend)
	}
	cacheJSON, _ := json.Marshal(cacheChange{Key: d.Key, Outcome: cacheOut})
	amendJSON, _ := json.Marshal(amend)
	f := "0"
	if force {
		f = "1"
	}
	c.m.cmd("decide")
	res, err := decideScript.Run(ctx, c.rdb,
		[]string{c.k.pending(), c.k.decision(d.ID), c.k.review(d.Key), c.k.cache(d.Key.Session), c.k.amend(), c.k.events()},
		d.ID, string(data), f, field, cacheOut, d.Key.Host, amendVal, c.node, streamMaxLen, string(cacheJSON), string(amendJSON),
		int(decisionTTL.Seconds()), int(cacheTTL.Seconds())).StringSlice()
	if err != nil {
		c.fail("decide", err)
		return d, false, err
	}
	if len(res) != 2 {
		return d, false, errors.New("unexpected reply from Redis")
	}
	switch res[0] {
	case "ok":
		return d, true, nil
	case "held":
		var held approvalsvc.ClusterDecision
		if err := json.Unmarshal([]byte(res[1]), &held); err != nil {
			c.m.errors.WithLabelValues("parse").Inc()
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
	var d approvalsvc.ClusterDecision
	if err := json.Unmarshal([]byte(v), &d); err != nil || d.ID != id {
		c.m.errors.WithLabelValues("parse").Inc()
		return d, false, fmt.Errorf("stored decision for %s cannot be parsed", id)
	}
	return d, true, nil
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
		var p pendingRecord
		if err := json.Unmarshal([]byte(data), &p); err != nil || p.Approval.ID != id {
			c.m.errors.WithLabelValues("parse").Inc()
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
	var p pendingRecord
	if err := json.Unmarshal([]byte(data), &p); err != nil || p.Approval.ID != id {
		c.m.errors.WithLabelValues("parse").Inc()
		return approvalsvc.Approval{}, approvalsvc.ReviewKey{}, false, fmt.Errorf("pending review %s cannot be parsed", id)
	}
	return p.Approval, p.Key, true, nil
}
