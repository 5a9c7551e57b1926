package webui

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// SSE event names of SPEC §7.3.
const (
	EventApprovalCreated  = "approval_created"
	EventApprovalDecided  = "approval_decided"
	EventBlocked          = "blocked"
	EventExecutionStarted = "execution_started"
	EventExecutionEnded   = "execution_ended"
)

// Event is one server-sent event: a name and a JSON object as data.
type Event struct {
	Name string
	Data json.RawMessage
}

// HubOptions tune a Hub; zero values take the defaults.
type HubOptions struct {
	// Buffer is how many events a subscriber may lag behind before it is
	// cut off (it then reconnects and reloads its state). Default 256.
	Buffer int
	// Heartbeat is the interval of keep-alive comments on idle streams, so
	// proxies and clients notice dead connections. Default 15s.
	Heartbeat time.Duration
	// WriteTimeout bounds each write to a stream, so a stuck client cannot
	// hold a goroutine forever. Default 10s.
	WriteTimeout time.Duration
	Logger       *slog.Logger
}

// Hub fans events out to every open /api/events stream. Publish never
// blocks: a subscriber that cannot keep up is disconnected rather than
// slowing the data path, and the page reloads its lists when it reconnects.
type Hub struct {
	opts    HubOptions
	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	closed  bool
	servers map[*http.Server]bool // servers whose Shutdown closes the hub
}

type subscriber struct {
	ch chan Event
}

// NewHub returns a Hub ready to publish to and serve.
func NewHub(opts HubOptions) *Hub {
	if opts.Buffer <= 0 {
		opts.Buffer = 256
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 15 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Hub{opts: opts, subs: make(map[*subscriber]struct{}), servers: make(map[*http.Server]bool)}
}

// validEventName keeps names to what SSE can carry on one line.
func validEventName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// Publish sends an event to every subscriber. data is marshalled to JSON
// once; an unmarshalable value or an invalid name is logged and dropped.
func (h *Hub) Publish(name string, data any) {
	if !validEventName(name) {
		h.opts.Logger.Warn("webui: dropping event with invalid name", "name_len", len(name))
		return
	}
	raw, err := json.Marshal(data)
	if err != nil {
		h.opts.Logger.Warn("webui: dropping event that does not marshal", "event", name, "err", err)
		return
	}
	ev := Event{Name: name, Data: raw}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.ch <- ev:
		default:
			// Too slow: cut it off so Publish stays non-blocking.
			delete(h.subs, s)
			close(s.ch)
			h.opts.Logger.Warn("webui: event stream subscriber fell behind; disconnected", "event", name)
		}
	}
}

// Subscribe registers a new subscriber. The channel is closed when the hub
// closes or the subscriber falls behind; cancel releases it early.
func (h *Hub) Subscribe() (events <-chan Event, cancel func()) {
	s := &subscriber{ch: make(chan Event, h.opts.Buffer)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		close(s.ch)
		return s.ch, func() {}
	}
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s.ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[s]; ok {
			delete(h.subs, s)
			close(s.ch)
		}
	}
}

// Subscribers reports how many streams are open.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Close ends every stream and refuses new ones; call it before shutting the
// admin listener down, since SSE connections never go idle on their own.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for s := range h.subs {
		delete(h.subs, s)
		close(s.ch)
	}
}

// ServeHTTP streams events as text/event-stream until the client leaves,
// the hub closes, or the client falls behind.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	h.closeOnShutdown(r)
	rc := http.NewResponseController(w)
	events, cancel := h.Subscribe()
	defer cancel()

	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream; charset=utf-8")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no")
	hdr.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)

	write := func(s string) bool {
		// A per-write deadline replaces the listener's WriteTimeout, which
		// would otherwise end every stream after a fixed time.
		_ = rc.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
		if _, err := fmt.Fprint(w, s); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// retry tells EventSource how soon to reconnect; the comment makes
	// the browser fire "open" at once.
	if !write("retry: 2000\n: connected\n\n") {
		return
	}
	tick := time.NewTicker(h.opts.Heartbeat)
	defer tick.Stop()
	ctx := r.Context()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if !write(formatEvent(ev)) {
				return
			}
		case <-tick.C:
			if !write(": ping\n\n") {
				return
			}
		}
	}
}

// closeOnShutdown makes the serving http.Server's Shutdown close the hub:
// Shutdown waits for connections to go idle, which an event stream never
// does, so without this every open page would hold shutdown to its deadline.
func (h *Hub) closeOnShutdown(r *http.Request) {
	srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server)
	if !ok || srv == nil {
		return
	}
	h.mu.Lock()
	known := h.servers[srv]
	h.servers[srv] = true
	h.mu.Unlock()
	if !known {
		srv.RegisterOnShutdown(h.Close)
	}
}

// formatEvent renders one event. json.Marshal output never contains a raw
// newline, so the data fits on one "data:" line.
func formatEvent(ev Event) string {
	return "event: " + ev.Name + "\ndata: " + string(ev.Data) + "\n\n"
}
