package cluster

// Credential placeholders across replicas (SPEC §7.7): the replica that
// mints an execution's placeholders stores each under the SHA-256 digest of
// its body with the execution id and credential name (sealed like every
// record; never the secret, never the body), before the registration
// returns. A replica that meets a candidate body it does not hold looks all
// the request's candidates up in one round trip
// (netproxy_cluster_commands_total{op="read_through_placeholder"}); a
// placeholder counts only while its execution's record is in Redis and
// verifies, and the lookup failing blocks the request (credentials package).
// The records go with their execution's end (or its replica's expiry).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// placeholderRecord is the value of P placeholders[digest].
type placeholderRecord struct {
	Exec string `json:"exec"`
	Cred string `json:"cred"`
	Node string `json:"node"`
}

// PlaceholderOwner is a placeholder's owner read from Redis. Held: this
// replica's registry holds the execution (its end reaches the broker).
type PlaceholderOwner struct {
	Exec, Cred string
	Held       bool
}

func bodyDigest(body string) string {
	s := sha256.Sum256([]byte(body))
	return hex.EncodeToString(s[:])
}

// placeholderScript returns, per digest, the sealed placeholder record and
// the sealed record of its execution ("" when absent).
//
// KEYS: placeholders hash, execs hash. ARGV: digests.
var placeholderScript = redis.NewScript(`
local out = {}
for i, d in ipairs(ARGV) do
  local p = redis.call('HGET', KEYS[1], d)
  local e = ''
  if p then
    local ok, rec = pcall(cjson.decode, string.sub(p, (string.find(p, '.', 1, true) or 0) + 1))
    if ok and type(rec) == 'table' and type(rec.exec) == 'string' then
      e = redis.call('HGET', KEYS[2], rec.exec) or ''
    end
  else
    p = ''
  end
  out[2*i-1] = p
  out[2*i] = e
end
return out
`)

// PublishPlaceholders stores an execution's new placeholders (body →
// credential name) before its registration returns (queued when Redis
// does not answer in time).
func (c *Cluster) PublishPlaceholders(execID string, bodies map[string]string) {
	recs := map[string]string{}
	for body, cred := range bodies {
		d := bodyDigest(body)
		data, _ := json.Marshal(placeholderRecord{Exec: execID, Cred: cred, Node: c.node})
		recs[d] = c.seal.seal(c.k.placeholders(), d, data)
	}
	c.mu.Lock()
	for d := range recs {
		c.ownPH[execID] = append(c.ownPH[execID], d)
	}
	c.mu.Unlock()
	write := func(ctx context.Context) error {
		c.m.cmd("placeholders")
		err := c.rdb.HSet(ctx, c.k.placeholders(), recs).Err()
		if err != nil {
			c.fail("placeholders", err)
		}
		return err
	}
	if c.up.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), readThroughTimeout)
		err := write(ctx)
		cancel()
		if err == nil {
			return
		}
	}
	c.enqueue(write)
}

// LookupPlaceholders returns the owners of those bodies that are live
// placeholders of some replica, in one round trip. An error (Redis down)
// means the caller cannot know and must block.
func (c *Cluster) LookupPlaceholders(bodies []string) (map[string]PlaceholderOwner, error) {
	if !c.up.Load() {
		return nil, errors.New("cluster store unreachable")
	}
	digests := make([]any, len(bodies))
	for i, b := range bodies {
		digests[i] = bodyDigest(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readThroughTimeout)
	defer cancel()
	c.m.cmd("read_through_placeholder")
	res, err := placeholderScript.Run(ctx, c.rdb, []string{c.k.placeholders(), c.k.execs()}, digests...).StringSlice()
	if err != nil {
		c.fail("read_through_placeholder", err)
		return nil, fmt.Errorf("cluster store: %v", err)
	}
	if len(res) != 2*len(bodies) {
		return nil, fmt.Errorf("cluster store: %d answers for %d placeholders", len(res), len(bodies))
	}
	out := map[string]PlaceholderOwner{}
	for i, body := range bodies {
		p, e := res[2*i], res[2*i+1]
		if p == "" {
			continue
		}
		d := digests[i].(string)
		payload, err := c.seal.open(c.k.placeholders(), d, p)
		var rec placeholderRecord
		if err == nil {
			if err = json.Unmarshal(payload, &rec); err == nil && (rec.Exec == "" || rec.Cred == "") {
				err = errors.New("placeholder record without execution or credential")
			}
		}
		if err != nil {
			c.reject(kindPlaceholder, c.k.placeholders()+" "+d[:12]+"…", err)
			continue
		}
		if e == "" || c.replay.isEnded(rec.Exec) {
			continue // its execution ended: a dead string
		}
		if _, _, err := c.openExec(rec.Exec, e); err != nil {
			c.reject(kindExecution, c.k.execs()+" "+rec.Exec, err)
			continue
		}
		o := PlaceholderOwner{Exec: rec.Exec, Cred: rec.Cred}
		if c.execs != nil {
			_, o.Held = c.execs.Get(rec.Exec)
		}
		out[body] = o
	}
	return out, nil
}

// dropPlaceholders removes the placeholder records of an execution that
// ended here (inside the exec_end transaction).
func (c *Cluster) dropPlaceholders(ctx context.Context, p redis.Pipeliner, id string) {
	c.mu.Lock()
	ds := c.ownPH[id]
	delete(c.ownPH, id)
	c.mu.Unlock()
	if len(ds) > 0 {
		p.HDel(ctx, c.k.placeholders(), ds...)
	}
}

// reapPlaceholders removes the placeholder records of executions reaped
// from dead replicas.
func (c *Cluster) reapPlaceholders(ctx context.Context, reaped map[string]bool) {
	all, err := c.rdb.HGetAll(ctx, c.k.placeholders()).Result()
	if err != nil {
		c.fail("reap", err)
		return
	}
	var del []string
	for d, v := range all {
		payload, err := c.seal.open(c.k.placeholders(), d, v)
		var rec placeholderRecord
		if err != nil || json.Unmarshal(payload, &rec) != nil || reaped[rec.Exec] {
			del = append(del, d)
		}
	}
	if len(del) > 0 {
		c.rdb.HDel(ctx, c.k.placeholders(), del...)
	}
}
