package cluster

// Read-through on a miss (SPEC §7.7): a replica never answers from not
// knowing. A framed token it does not hold is read from Redis (one round
// trip, counted in netproxy_cluster_commands_total{op="read_through_token"})
// before the connection is refused; Redis down means refused (fail closed).
// A token held locally costs no Redis operation.

import (
	"context"
	"encoding/hex"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// readThroughTimeout bounds the wait of a connection on the read-through.
const readThroughTimeout = time.Second

// tokenScript returns the sealed token index entry of a digest and the
// sealed execution record it names (both verified by the caller).
//
// KEYS: tokens hash, execs hash. ARGV: digest (hex).
var tokenScript = redis.NewScript(`
local t = redis.call('HGET', KEYS[1], ARGV[1])
if not t then return {} end
local dot = string.find(t, '.', 1, true)
if not dot then return {t} end
local e = redis.call('HGET', KEYS[2], string.sub(t, dot + 1))
if not e then return {t} end
return {t, e}
`)

// readThroughToken is the registry's miss resolver: it adopts the
// execution of a token digest another replica registered, and reports
// whether it did.
func (c *Cluster) readThroughToken(key [32]byte) bool {
	if !c.up.Load() || c.execs == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), readThroughTimeout)
	defer cancel()
	rec, ok, err := c.fetchToken(ctx, key)
	if err != nil || !ok || rec.Node == c.node {
		return false // this replica's own executions are all held locally
	}
	c.adopt(rec, key)
	_, held := c.execs.Get(rec.Execution.ID)
	return held
}

// fetchToken reads and verifies the execution of a token digest.
func (c *Cluster) fetchToken(ctx context.Context, key [32]byte) (execRecord, bool, error) {
	digest := hex.EncodeToString(key[:])
	c.m.cmd("read_through_token")
	res, err := tokenScript.Run(ctx, c.rdb, []string{c.k.tokens(), c.k.execs()}, digest).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		c.fail("read_through_token", err)
		return execRecord{}, false, err
	}
	if len(res) < 2 {
		return execRecord{}, false, nil // unknown (or an index entry without its execution)
	}
	id, err := c.seal.open(c.k.tokens(), digest, res[0])
	if err != nil {
		c.reject(kindExecution, c.k.tokens()+" "+digest[:12]+"…", err)
		return execRecord{}, false, nil
	}
	rec, rkey, err := c.openExec(string(id), res[1])
	if err == nil && rkey != key {
		err = errors.New("execution record is for another token")
	}
	if err != nil {
		c.reject(kindExecution, c.k.execs()+" "+string(id), err)
		return execRecord{}, false, nil
	}
	return rec, true, nil
}

// publishNow stores an execution registered here before its registration
// returns, so that a connection of it reaching another replica at once is
// attributed there (through the read-through). When Redis does not answer
// in time it is queued like any change (the registration does not fail).
func (c *Cluster) publishNow(rec execRecord) {
	if c.up.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), readThroughTimeout)
		err := c.publishExec(ctx, rec)
		cancel()
		if err == nil {
			return
		}
	}
	c.enqueue(func(ctx context.Context) error { return c.publishExec(ctx, rec) })
}
