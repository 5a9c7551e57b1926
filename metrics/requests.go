package metrics

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// maxRequestSeries bounds requestCounters' cache. A running proxy produces a
// few dozen (protocol, decision, reason, source) tuples; only values outside
// the fixed sets (all clamped to "other") could make more, and those are
// then resolved through the vector each time instead of growing the cache.
const maxRequestSeries = 256

// requestKey is the raw label tuple of one decision, before clamp.
type requestKey struct{ protocol, decision, reason, source string }

// requestCounters resolves the netproxy_requests_total child of a decision
// once per label tuple: WithLabelValues per event validated, hashed and
// looked up four label values under the vector's lock on every decision.
// Reads compare with the last tuple seen (a keep-alive connection repeats
// its tuple; hashing four strings cost more than the compare), else one
// lock-free map lookup; a new tuple copies the (small) map. Children are
// never deleted from requests_total, so a cached one stays the series the
// vector exposes.
type requestCounters struct {
	vec *prometheus.CounterVec

	mu    sync.Mutex // serialises adding a tuple
	byKey atomic.Pointer[map[requestKey]*requestEntry]
	last  atomic.Pointer[requestEntry]
}

type requestEntry struct {
	key     requestKey
	counter prometheus.Counter
}

func (r *requestCounters) counter(k requestKey) prometheus.Counter {
	if e := r.last.Load(); e != nil && e.key == k {
		return e.counter
	}
	if m := r.byKey.Load(); m != nil {
		if e, ok := (*m)[k]; ok {
			r.last.Store(e)
			return e.counter
		}
	}
	return r.resolve(k)
}

func (r *requestCounters) resolve(k requestKey) prometheus.Counter {
	c := r.vec.WithLabelValues(
		clamp(k.protocol, protocolValues),
		clamp(k.decision, decisionValues),
		clamp(k.reason, reasonValues),
		clamp(k.source, sourceValues),
	)
	r.mu.Lock()
	defer r.mu.Unlock()
	var cur map[requestKey]*requestEntry
	if p := r.byKey.Load(); p != nil {
		cur = *p
	}
	if len(cur) >= maxRequestSeries {
		return c
	}
	if _, ok := cur[k]; ok {
		return c
	}
	next := make(map[requestKey]*requestEntry, len(cur)+1)
	for key, v := range cur {
		next[key] = v
	}
	e := &requestEntry{key: k, counter: c}
	next[k] = e
	r.byKey.Store(&next)
	r.last.Store(e)
	return c
}

// cached is how many tuples the cache holds (tests).
func (r *requestCounters) cached() int {
	if p := r.byKey.Load(); p != nil {
		return len(*p)
	}
	return 0
}
