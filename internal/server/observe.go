package server

import (
	"sync/atomic"

	"github.com/netproxy/netproxy/internal/observe"
)

// decisionSinks is the proxy core's decision sink: the server's current
// fan-out (AddSink replaces it before Start), each sink called directly.
// It is one pointer, so it sits in the Core.Sink interface without an
// allocation, and the event is copied once per sink instead of also through
// a func wrapper and a method value per decision.
type decisionSinks struct {
	sinks *atomic.Pointer[observe.Fanout]
}

func (d decisionSinks) ObserveDecision(e observe.DecisionEvent) {
	for _, s := range *d.sinks.Load() {
		s.ObserveDecision(e)
	}
}
