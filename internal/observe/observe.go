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
	// Time is when the decision was made; Started when the request
	// arrived (zero: the same as Time). A review's wait lies between them.
	Time     time.Time
	Started  time.Time
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

// ConnectionClosedEvent is one open connection or tunnel that netproxy
// closed because the current state no longer allows it (SPEC §3.9): its
// target is now denied or not_allowed_local, the proxy was disabled, or its
// execution ended.
type ConnectionClosedEvent struct {
	Time     time.Time
	Reason   string // denied | not_allowed_local | proxy_disabled | execution_ended
	Protocol hostpolicy.Protocol
	Host     string // normalised target host ("" when no request was made yet)
	Port     uint16
	Client   string
	// Attribution of the connection (empty when unattributed).
	ExecutionID   string
	SessionID     string
	EnvironmentID string
}

// ConnectionSink receives every connection netproxy closes for SPEC §3.9.
// It must not block.
type ConnectionSink interface {
	ConnectionClosed(ConnectionClosedEvent)
}

// ConnectionEndEvent is the end of one allowed request or connection
// (SPEC §7.5 connection_end): a plain-HTTP exchange, an intercepted inner
// request, or a tunnel. Bytes are counted as netproxy_bytes_total counts
// them (bodies for HTTP exchanges, everything relayed for tunnels).
type ConnectionEndEvent struct {
	Time     time.Time // when it ended
	Started  time.Time // when the request or connection arrived
	Protocol hostpolicy.Protocol
	Host     string // normalised target host
	Port     uint16
	Method   string // the HTTP method, CONNECT for a tunnel, "" for SOCKS5
	Client   string
	// Attribution of the connection (empty when unattributed).
	ExecutionID   string
	SessionID     string
	EnvironmentID string
	BytesOut      int64 // client → upstream
	BytesIn       int64 // upstream → client
	Status        int   // the upstream's HTTP status; 0 for a tunnel or none
	Close         string
}

// ConnectionEndSink receives every connection_end. It must not block.
type ConnectionEndSink interface {
	ConnectionEnd(ConnectionEndEvent)
}
