package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// hostStaleAfter is how long a tracked host must have gone without a denial
// before a new host may take its label. It bounds series churn: a flood of
// random hosts cannot replace the hot hosts' series, it lands in "other".
const hostStaleAfter = time.Minute

// maxHostLabelLen is the longest DNS name; longer values are never labels.
const maxHostLabelLen = 253

// hostLabels bounds the host label of netproxy_denied_hosts_total.
//
// Up to max hosts have their own series, kept in an LRU ordered by last
// denial. A host not yet tracked is admitted when there is room, or when the
// least recently denied tracked host has been quiet for hostStaleAfter: that
// host is evicted and its series deleted (its past samples stay in
// Prometheus; if it is denied again later it starts a fresh series from 0,
// which rate()/increase() treat as a counter reset). Otherwise the denial is
// counted under host="other". Evicted counts are not folded into "other",
// because that would show as a spurious burst in rate(other).
type hostLabels struct {
	vec   *prometheus.CounterVec
	now   func() time.Time
	other prometheus.Counter

	mu    sync.Mutex // serialises admission (check oldest + add) against itself
	max   int
	cache *lru.Cache[string, *hostEntry]
}

type hostEntry struct {
	counter  prometheus.Counter
	lastSeen atomic.Int64 // unix nanoseconds of the last denial
}

func newHostLabels(max int, vec *prometheus.CounterVec, now func() time.Time) *hostLabels {
	h := &hostLabels{vec: vec, now: now, max: max, other: vec.WithLabelValues(OtherLabel)}
	cache, err := lru.NewWithEvict[string, *hostEntry](max, func(host string, _ *hostEntry) {
		vec.DeleteLabelValues(host)
	})
	if err != nil {
		// Only a non-positive size fails, and New never passes one.
		panic("metrics: host label LRU: " + err.Error())
	}
	h.cache = cache
	return h
}

// inc counts one denial of host.
func (h *hostLabels) inc(host string) {
	if !validHostLabel(host) {
		h.other.Inc()
		return
	}
	now := h.now().UnixNano()
	if e, ok := h.cache.Get(host); ok {
		e.lastSeen.Store(now)
		e.counter.Inc()
		return
	}
	h.mu.Lock()
	e, ok := h.cache.Get(host) // admitted by a concurrent caller meanwhile?
	if !ok {
		if h.cache.Len() >= h.max {
			_, oldest, found := h.cache.GetOldest()
			if found && now-oldest.lastSeen.Load() < int64(hostStaleAfter) {
				h.mu.Unlock()
				h.other.Inc()
				return
			}
		}
		e = &hostEntry{counter: h.vec.WithLabelValues(host)}
		h.cache.Add(host, e) // evicts (and deletes the series of) the oldest when full
	}
	e.lastSeen.Store(now)
	h.mu.Unlock()
	e.counter.Inc()
}

// validHostLabel accepts only what a normalised host can look like: DNS
// characters, IP literal characters, and not our own "other"/"none" values.
func validHostLabel(host string) bool {
	if host == "" || len(host) > maxHostLabelLen || host == OtherLabel || host == NoneLabel {
		return false
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '.', c == '-', c == '_', c == ':', c == '%':
		default:
			return false
		}
	}
	return true
}
