package cluster

// Replay protection (SPEC §7.7): a valid record written back where it was
// (an ended execution re-added, an amendment or session cache rolled back,
// a decided review reopened) verifies, so each replica refuses it from what
// it remembers: the highest sequence number accepted per amendment and
// session-cache entry, and tombstones of ended executions and decided
// reviews. Sequence numbers come from INCR on P seq, raised past the
// highest this replica has seen so that resetting the counter in Redis
// cannot make new records look old.
//
// A replica started after the newer record was written and then deleted
// has nothing to remember; docs/cluster.md ("Trust model") says what that
// leaves an attacker who can write Redis without the key.

import (
	"context"
	"sync"
	"time"
)

// tombstoneTTL is how long ended executions and decided reviews are
// remembered (as long as a session cache lives).
const tombstoneTTL = cacheTTL

type replayGuard struct {
	mu      sync.Mutex
	maxSeq  uint64
	seq     map[string]uint64    // item → highest sequence accepted
	ended   map[string]time.Time // execution id → when it ended here
	decided map[string]time.Time // approval id → when it was decided
}

func newReplayGuard() *replayGuard {
	return &replayGuard{seq: map[string]uint64{}, ended: map[string]time.Time{}, decided: map[string]time.Time{}}
}

func amendItem(host string) string        { return "a\x00" + host }
func cacheItem(sess, field string) string { return "c\x00" + sess + "\x00" + field }
func (g *replayGuard) observe(seq uint64) { // callers hold g.mu
	if seq > g.maxSeq {
		g.maxSeq = seq
	}
}

// accept reports whether seq is not older than what was accepted for item
// (the same record read again is accepted) and remembers it.
func (g *replayGuard) accept(item string, seq uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if seq == 0 || seq < g.seq[item] {
		return false
	}
	g.seq[item] = seq
	g.observe(seq)
	return true
}

func (g *replayGuard) endExec(id string) {
	g.mu.Lock()
	g.ended[id] = time.Now()
	g.mu.Unlock()
}

func (g *replayGuard) isEnded(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.ended[id]
	return ok
}

func (g *replayGuard) decide(id string) {
	g.mu.Lock()
	g.decided[id] = time.Now()
	g.mu.Unlock()
}

func (g *replayGuard) isDecided(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.decided[id]
	return ok
}

// prune forgets tombstones older than tombstoneTTL.
func (g *replayGuard) prune(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range []map[string]time.Time{g.ended, g.decided} {
		for id, at := range m {
			if now.Sub(at) > tombstoneTTL {
				delete(m, id)
			}
		}
	}
}

// nextSeq is the sequence number of a new versioned record: INCR on P seq,
// but never below what this replica has already seen.
func (c *Cluster) nextSeq(ctx context.Context) (uint64, error) {
	c.m.cmd("seq")
	n, err := c.rdb.Incr(ctx, c.k.seq()).Uint64()
	if err != nil {
		c.fail("seq", err)
		return 0, err
	}
	g := c.replay
	g.mu.Lock()
	defer g.mu.Unlock()
	if n <= g.maxSeq {
		n = g.maxSeq + 1
	}
	g.maxSeq = n
	return n, nil
}
