package approvalsvc

import (
	"sync"
	"time"

	"github.com/netproxy/netproxy/internal/observe"
)

// BlockedCapacity is how many blocked requests GET /api/blocked keeps.
const BlockedCapacity = 200

// Blocked is one entry of GET /api/blocked (SPEC §7.3).
type Blocked struct {
	TS          string `json:"ts"`
	Host        string `json:"host"`
	Port        uint16 `json:"port"`
	Protocol    string `json:"protocol"`
	Method      string `json:"method"`
	Reason      string `json:"reason"`
	Decision    string `json:"decision"`
	Source      string `json:"source"`
	Client      string `json:"client"`
	ExecutionID string `json:"execution_id"`
}

// blockedRing keeps the last BlockedCapacity blocked requests.
type blockedRing struct {
	mu    sync.Mutex
	items ring[Blocked]
}

func newBlockedRing(n int) *blockedRing { return &blockedRing{items: newRing[Blocked](n)} }

func (r *blockedRing) add(b Blocked) {
	r.mu.Lock()
	r.items.push(b)
	r.mu.Unlock()
}

// list returns the entries newest first.
func (r *blockedRing) list() []Blocked {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.items.appendNewestFirst(make([]Blocked, 0, r.items.len()))
}

// ObserveDecision implements observe.DecisionSink: every blocked request is
// kept for /api/blocked and published as a "blocked" event. It never blocks
// and holds only the host, never a query string or header.
func (s *Service) ObserveDecision(ev observe.DecisionEvent) {
	d := ev.Decision
	if d.Allowed() {
		return
	}
	host := d.Host
	if host == "" {
		host = ev.Request.Host
	}
	port := d.Port
	if port == 0 {
		port = ev.Request.Port
	}
	t := ev.Time
	if t.IsZero() {
		t = s.now()
	}
	b := Blocked{
		TS:          t.UTC().Format(time.RFC3339Nano),
		Host:        host,
		Port:        port,
		Protocol:    string(ev.Request.Protocol),
		Method:      ev.Request.Method,
		Reason:      string(d.Reason),
		Decision:    string(d.Verdict),
		Source:      string(d.Source),
		Client:      ev.Request.Client,
		ExecutionID: ev.Request.ExecutionID,
	}
	s.blocked.add(b)
	s.bus.publish(EventBlocked, b)
}

// BlockedRequests returns the last blocked requests, newest first.
func (s *Service) BlockedRequests() []Blocked { return s.blocked.list() }
