// Package observe carries finished decisions from the data path to the parts
// that record them (metrics, audit log, blocked-request ring, event streams).
//
// Sinks are called on the data path: they must never block and never fail a
// request. It must never carry a token, a query string or a header value.
package observe

import (
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
)

// DecisionEvent is one finished network decision.
type DecisionEvent struct {
	Time     time.Time
	Request  hostpolicy.Request
	Decision hostpolicy.Decision
	// Elapsed is the time the chain took to decide (including any review wait).
	Elapsed time.Duration
}

// DecisionSink receives every network decision. It must not block.
type DecisionSink interface {
	ObserveDecision(DecisionEvent)
}

// Fanout delivers an event to each sink in order.
type Fanout []DecisionSink

func (f Fanout) ObserveDecision(e DecisionEvent) {
	for _, s := range f {
		s.ObserveDecision(e)
	}
}
