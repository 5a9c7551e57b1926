// Package audit owns netproxy's audit log (SPEC §7.5): JSON Lines, one line
// per network decision (`network_decision`), per resolved approval
// (`approval_resolved`) and per exec decision (`exec_decision`), every line
// with the same fixed set of keys.
//
// Records are handed to a single writer goroutine through a bounded buffer so
// the data path never waits for the disk. When the buffer is full the record
// is dropped, counted (the drop callback, wired to
// netproxy_audit_dropped_total) and reported in the log by the writer
// goroutine — never silently, never by blocking the request.
//
// It must never write a token, a query string or a header value: hosts are
// the normalised host (a raw host is cut to its host part), methods are
// checked to be a bare HTTP token, and no request URL or header is accepted.
package audit

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/netproxy/netproxy/attribution"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
)

// DefaultBufferSize is the number of records the buffer holds when the
// configuration gives none (`audit.buffer_size`).
const DefaultBufferSize = 4096

// flushInterval is how often the writer reports drops and flushes when
// nothing else woke it.
const flushInterval = time.Second

// batchLinger is how long the writer lets records accumulate after a batch;
// it bounds the added latency of a line reaching the file.
const batchLinger = 2 * time.Millisecond

// Event names of SPEC §7.5.
const (
	EventNetworkDecision  = "network_decision"
	EventApprovalResolved = "approval_resolved"
	EventExecDecision     = "exec_decision"
	// EventConnectionClosed is an open connection or tunnel closed because
	// the policy, the kill switch or its execution's end no longer allows
	// it (SPEC §3.9).
	EventConnectionClosed = "connection_closed"
	// EventConnectionEnd ends every allowed request or connection: bytes,
	// duration, status and close reason (SPEC §7.5, access records).
	EventConnectionEnd = "connection_end"
)

// Record is one audit line. Every key is always written (empty string or 0
// when not applicable) so the file has one fixed schema.
type Record struct {
	Time time.Time `json:"-"` // written as ts by the writer goroutine
	TS   string    `json:"ts"`
	// Started is when the request or connection arrived; written as
	// started ("" when zero: the line has no arrival).
	Started       time.Time `json:"-"`
	Event         string    `json:"event"`
	Decision      string    `json:"decision"`
	Reason        string    `json:"reason"`
	Source        string    `json:"source"`
	Protocol      string    `json:"protocol"`
	Host          string    `json:"host"`
	Port          uint16    `json:"port"`
	Method        string    `json:"method"`
	Client        string    `json:"client"`
	SessionID     string    `json:"session_id"`
	EnvironmentID string    `json:"environment_id"`
	ExecutionID   string    `json:"execution_id"`
	Pattern       string    `json:"pattern"`
	Override      string    `json:"override"`
	ApprovalID    string    `json:"approval_id"`
	Reviewer      string    `json:"reviewer"`
	Outcome       string    `json:"outcome"`
	Rationale     string    `json:"rationale"`
	// Addrs are the addresses the decision used (the pinned answers of a
	// name, a literal, static answers); [] when none. `netproxy replay`
	// re-judges a line with them instead of asking DNS.
	Addrs []netip.Addr `json:"addrs"`
	// Level is the narrower policy that blocked the request ("execution"
	// or "session"); "" otherwise.
	Level string `json:"level"`
	// Rule is the index of the request rule that decided (SPEC §3.10);
	// null when none. The path itself is never written: it may carry a
	// token (docs/policy.md, request rules).
	Rule *int `json:"rule"`
	// Shadow is the [shadow] candidate's decision when it disagrees with
	// this one; null otherwise.
	Shadow *ShadowRecord `json:"shadow"`
	// End marks a connection_end line: only then are bytes_out,
	// bytes_in, duration_ms (and status, when not 0) written as numbers;
	// null on every other line.
	End        bool   `json:"-"`
	BytesOut   int64  `json:"bytes_out"`
	BytesIn    int64  `json:"bytes_in"`
	DurationMS int64  `json:"duration_ms"`
	Status     int    `json:"status"`
	Close      string `json:"close"`
	// Seq and Prev chain the lines (SPEC §7.5): set by the writer
	// goroutine, never by a caller.
	Seq  uint64 `json:"seq"`
	Prev string `json:"prev"`
}

// ShadowRecord is the "shadow" object of a network_decision line.
type ShadowRecord struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Pattern  string `json:"pattern"`
}

// ApprovalEvent describes one resolved approval (network or exec).
type ApprovalEvent struct {
	Time       time.Time
	Started    time.Time // when the review opened (zero: unknown)
	ApprovalID string
	Kind       string // "network" | "exec"; written as the line's source
	Decision   string // effective decision: "allow" | "deny"
	Reason     string
	Host       string // network approvals: the normalised host
	Port       uint16
	Protocol   string
	// Method and Rule: an ask request rule's review (the path is never
	// audited: it may carry a token).
	Method        string
	Rule          *int
	SessionID     string
	EnvironmentID string
	ExecutionID   string
	Reviewer      string // "user" | "guardian" | "hook" | ...
	Outcome       string // allow_once | allow_session | allow_always | deny | deny_always | abort | timeout | error
	Rationale     string
}

// ExecEvent describes one exec-policy decision reported by execwrap.
type ExecEvent struct {
	Time          time.Time
	Requirement   string // "skip" | "needs_approval" | "forbidden"
	Reason        string
	Source        string // "prefix" | "heuristics" | ...
	SessionID     string
	EnvironmentID string
	ExecutionID   string
	ApprovalID    string
	Reviewer      string
	Outcome       string
	Rationale     string
}

// Option configures a Writer.
type Option func(*Writer)

// WithDropCounter sets the callback called once per dropped record (from the
// caller's goroutine; it must be cheap and non-blocking — a counter Inc).
func WithDropCounter(f func()) Option { return func(w *Writer) { w.onDrop = f } }

// Writer is the audit log. It implements observe.DecisionSink. Create it
// with Open; stop it with Close.
type Writer struct {
	path   string
	logger *slog.Logger
	onDrop func()

	// mu makes Close wait for in-flight sends: once Close holds the write
	// lock and sets closed, nothing more enters queue, so the writer's final
	// drain sees every accepted record. The data path takes the read lock.
	mu     sync.RWMutex
	closed bool
	queue  chan Record

	reopen  chan chan error // reopen requests for the writer goroutine
	stop    chan struct{}   // closed by Close: drain, flush, sync, exit
	stopped sync.Once
	result  error         // the final flush/sync/close error, set before done
	done    chan struct{} // closed when the writer goroutine has exited

	dropped      atomic.Uint64 // total drops, for tests and Dropped()
	droppedSince atomic.Uint64 // drops not yet reported in the log
	lastDropLog  atomic.Int64  // unix ns of the last drop report (rate limit)
}

// Open opens (creating, mode 0600, with its folder) the audit file at path in
// append mode and starts the writer. bufSize ≤ 0 means DefaultBufferSize.
// logger receives write errors and drop reports (nil discards them; the
// drop counter still counts).
//
// The chain of SPEC §7.5 continues where the file (or, after a rotation,
// the chain state saved beside it) left off; see chain.go.
func Open(path string, bufSize int, logger *slog.Logger, opts ...Option) (*Writer, error) {
	if path == "" {
		return nil, errors.New("audit: empty path (set [audit] path in the config)")
	}
	if bufSize <= 0 {
		bufSize = DefaultBufferSize
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	ch, err := recoverChain(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	w := &Writer{
		path:   path,
		logger: logger,
		queue:  make(chan Record, bufSize),
		reopen: make(chan chan error),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	for _, o := range opts {
		o(w)
	}
	go w.run(f, ch)
	return w, nil
}

func openFile(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit: create folder of %s ([audit] path): %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s ([audit] path): %w", path, err)
	}
	return f, nil
}

// Path returns the audit file's path.
func (w *Writer) Path() string { return w.path }

// Dropped returns how many records were dropped so far.
func (w *Writer) Dropped() uint64 {
	if w == nil {
		return 0
	}
	return w.dropped.Load()
}

// Pending returns how many records wait in the buffer.
func (w *Writer) Pending() int {
	if w == nil {
		return 0
	}
	return len(w.queue)
}

// ObserveDecision queues one network_decision line. It never blocks.
func (w *Writer) ObserveDecision(e observe.DecisionEvent) {
	if w == nil {
		return
	}
	r, d := &e.Request, &e.Decision
	// The data path fills Host with the normalised host, or with the raw
	// host when normalisation failed: cut it to its host part either way.
	host := d.Host
	if host == "" {
		host = r.Host
	}
	host = SanitizeHost(host)
	port := d.Port
	if port == 0 {
		port = r.Port
	}
	// An unattributed request belongs to the default session and
	// environment (SPEC §4.3), as its approvals do.
	session, env := sessionOf(r.ExecutionID, r.SessionID, r.EnvironmentID)
	started := e.Started
	if started.IsZero() {
		started = e.Time // decided on arrival
	}
	w.enqueue(Record{
		Time:          e.Time,
		Started:       started,
		Event:         EventNetworkDecision,
		Decision:      string(d.Verdict),
		Reason:        string(d.Reason),
		Source:        string(d.Source),
		Protocol:      string(r.Protocol),
		Host:          host,
		Port:          port,
		Method:        SanitizeMethod(r.Method),
		Client:        r.Client,
		SessionID:     session,
		EnvironmentID: env,
		ExecutionID:   r.ExecutionID,
		Pattern:       d.Pattern,
		Override:      d.Override,
		ApprovalID:    d.ApprovalID,
		Rationale:     d.Rationale,
		Addrs:         d.Addrs,
		Level:         d.Level,
		Rule:          ruleIndex(d),
		Shadow:        shadowRecord(d.Shadow),
	})
}

// sessionOf is the session and environment a line names: an unattributed
// request or connection belongs to the default ones (SPEC §4.3).
func sessionOf(execution, session, env string) (string, string) {
	if execution == "" {
		return cmp.Or(session, attribution.DefaultSession), cmp.Or(env, attribution.DefaultSession)
	}
	return session, env
}

// ruleIndex is the deciding request rule's index, or nil. The index is
// moved to the heap only when there is one: most decisions have no rule,
// and their records must not allocate.
func ruleIndex(d *hostpolicy.Decision) *int {
	i, ok := d.RuleIndex()
	if !ok {
		return nil
	}
	p := new(int)
	*p = i
	return p
}

func shadowRecord(s *hostpolicy.ShadowDecision) *ShadowRecord {
	if s == nil {
		return nil
	}
	return &ShadowRecord{Decision: string(s.Verdict), Reason: string(s.Reason), Pattern: s.Pattern}
}

// ApprovalResolved queues one approval_resolved line. It never blocks.
func (w *Writer) ApprovalResolved(a ApprovalEvent) {
	if w == nil {
		return
	}
	w.enqueue(Record{
		Time:          a.Time,
		Started:       a.Started,
		Event:         EventApprovalResolved,
		Decision:      a.Decision,
		Reason:        a.Reason,
		Source:        a.Kind,
		Protocol:      a.Protocol,
		Host:          SanitizeHost(a.Host),
		Port:          a.Port,
		Method:        SanitizeMethod(a.Method),
		Rule:          a.Rule,
		SessionID:     a.SessionID,
		EnvironmentID: a.EnvironmentID,
		ExecutionID:   a.ExecutionID,
		ApprovalID:    a.ApprovalID,
		Reviewer:      a.Reviewer,
		Outcome:       a.Outcome,
		Rationale:     a.Rationale,
	})
}

// ConnectionClosed queues one connection_closed line: decision deny, the
// close reason, and the source that reason belongs to. It never blocks.
func (w *Writer) ConnectionClosed(e observe.ConnectionClosedEvent) {
	if w == nil {
		return
	}
	session, env := sessionOf(e.ExecutionID, e.SessionID, e.EnvironmentID)
	source := "baseline_policy"
	if e.Reason == "proxy_disabled" || e.Reason == "execution_ended" {
		// The proxy's own state (network.enabled, the execution
		// registry) closed it, not the lists.
		source = "proxy_state"
	}
	w.enqueue(Record{
		Time:          e.Time,
		Event:         EventConnectionClosed,
		Decision:      "deny",
		Reason:        e.Reason,
		Source:        source,
		Protocol:      string(e.Protocol),
		Host:          SanitizeHost(e.Host),
		Port:          e.Port,
		Client:        e.Client,
		SessionID:     session,
		EnvironmentID: env,
		ExecutionID:   e.ExecutionID,
	})
}

// ConnectionEnd queues one connection_end line (SPEC §7.5 access
// record). It never blocks.
func (w *Writer) ConnectionEnd(e observe.ConnectionEndEvent) {
	if w == nil {
		return
	}
	session, env := sessionOf(e.ExecutionID, e.SessionID, e.EnvironmentID)
	w.enqueue(Record{
		Time:          e.Time,
		Started:       e.Started,
		Event:         EventConnectionEnd,
		Decision:      "allow",
		Protocol:      string(e.Protocol),
		Host:          SanitizeHost(e.Host),
		Port:          e.Port,
		Method:        SanitizeMethod(e.Method),
		Client:        e.Client,
		SessionID:     session,
		EnvironmentID: env,
		ExecutionID:   e.ExecutionID,
		End:           true,
		BytesOut:      e.BytesOut,
		BytesIn:       e.BytesIn,
		DurationMS:    max(e.Time.Sub(e.Started).Milliseconds(), 0),
		Status:        e.Status,
		Close:         e.Close,
	})
}

// ExecDecision queues one exec_decision line. It never blocks.
func (w *Writer) ExecDecision(x ExecEvent) {
	if w == nil {
		return
	}
	w.enqueue(Record{
		Time:          x.Time,
		Event:         EventExecDecision,
		Decision:      x.Requirement,
		Reason:        x.Reason,
		Source:        x.Source,
		SessionID:     x.SessionID,
		EnvironmentID: x.EnvironmentID,
		ExecutionID:   x.ExecutionID,
		ApprovalID:    x.ApprovalID,
		Reviewer:      x.Reviewer,
		Outcome:       x.Outcome,
		Rationale:     x.Rationale,
	})
}

func (w *Writer) enqueue(r Record) {
	w.mu.RLock()
	if !w.closed {
		select {
		case w.queue <- r:
			w.mu.RUnlock()
			return
		default:
		}
	}
	w.mu.RUnlock()
	w.drop()
}

func (w *Writer) drop() {
	w.dropped.Add(1)
	w.droppedSince.Add(1)
	if w.onDrop != nil {
		w.onDrop()
	}
	// Reported from here too (not only by the writer goroutine), so drops
	// are logged even while the writer is stuck on a slow disk.
	w.reportDrops(false)
}

// reportDrops logs the drops not yet reported, at most once per second
// unless force is set.
func (w *Writer) reportDrops(force bool) {
	now := time.Now().UnixNano()
	last := w.lastDropLog.Load()
	if !force && (now-last < int64(time.Second) || !w.lastDropLog.CompareAndSwap(last, now)) {
		return
	}
	if n := w.droppedSince.Swap(0); n > 0 {
		w.logger.Warn("audit buffer full: records dropped", "dropped", n, "path", w.path, "buffer_size", cap(w.queue))
	}
}

// Reopen closes and reopens the audit file at the same path (log rotation:
// rename the file, then send SIGHUP). Records queued meanwhile are written to
// the new file.
func (w *Writer) Reopen() error {
	if w == nil {
		return nil
	}
	reply := make(chan error, 1)
	select {
	case w.reopen <- reply:
	case <-w.done:
		return errors.New("audit: reopen after close")
	}
	return <-reply
}

// Close stops accepting records (later ones are counted as dropped), writes
// every queued record, flushes and fsyncs the file and closes it. ctx bounds
// the wait; on expiry ctx's error is returned and the writer finishes in the
// background.
func (w *Writer) Close(ctx context.Context) error {
	if w == nil {
		return nil
	}
	w.stopped.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		close(w.stop)
	})
	select {
	case <-w.done:
		return w.result
	case <-ctx.Done():
		return fmt.Errorf("audit: close %s: %w", w.path, ctx.Err())
	}
}

// run is the writer goroutine: the only one touching the file.
func (w *Writer) run(f *os.File, ch chain) {
	defer close(w.done)
	bw := bufio.NewWriterSize(f, 64<<10)
	line := make([]byte, 0, 1024)
	ticker := time.NewTicker(flushInterval)
	defer ticker.Stop()
	var failing bool // in a burst of write errors: log once per burst
	buffered := 0    // records in bw not yet flushed to the file
	// flushed is the chain as it stands in the file: lines lost in a failed
	// write must not leave a gap, so the chain rewinds to it.
	flushed := ch

	// lost counts n records that cannot reach the file as drops.
	lost := func(n int, err error) {
		w.dropped.Add(uint64(n))
		if w.onDrop != nil {
			for range n {
				w.onDrop()
			}
		}
		if !failing {
			w.logger.Error("audit write failed; records are being lost", "path", w.path, "lost", n, "err", err)
		}
		failing = true
	}
	// lastTS keeps the file in ts order (SPEC §7.5: ts is when a line was
	// decided): two goroutines may read the clock and queue in opposite
	// orders, microseconds apart; the later-queued line then takes the
	// earlier line's ts instead of going backwards.
	var lastTS time.Time
	write := func(r *Record) {
		if r.Time.IsZero() {
			r.Time = time.Now()
		}
		if r.Time.Before(lastTS) {
			r.Time = lastTS
		}
		lastTS = r.Time
		line = ch.appendLine(line[:0], r)
		if _, err := bw.Write(line); err != nil {
			// bufio keeps failing once a write failed: drop what it holds.
			lost(buffered+1, err)
			bw.Reset(f)
			buffered = 0
			ch = flushed
			return
		}
		buffered++
	}
	flush := func() {
		if err := bw.Flush(); err != nil {
			lost(buffered, err)
			bw.Reset(f)
			ch = flushed
		} else {
			if buffered > 0 {
				failing = false
			}
			flushed = ch
		}
		buffered = 0
	}
	drain := func() {
		for {
			select {
			case r := <-w.queue:
				write(&r)
			default:
				return
			}
		}
	}

	for {
		select {
		case r := <-w.queue:
			write(&r)
			drain()
			flush()
			// Linger before parking on the queue again: while we sleep no
			// receiver is waiting, so the data path's sends are plain
			// buffer copies instead of goroutine wake-ups (one wake-up per
			// batch, not per record). Idle, we stay parked: no wake-ups.
			time.Sleep(batchLinger)
		case <-ticker.C:
			flush()
			w.reportDrops(false)
		case <-w.stop:
			// closed is set, so nothing enters the queue any more.
			drain()
			flush()
			w.reportDrops(true)
			if err := saveChain(w.path, flushed); err != nil {
				w.logger.Error("audit: cannot save the chain state; a restart after rotating the file will restart seq", "path", w.path, "err", err)
			}
			err := f.Sync()
			if errors.Is(err, syscall.EINVAL) {
				err = nil // pipes and character devices cannot be synced
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				w.result = fmt.Errorf("audit: sync/close %s: %w", w.path, err)
			}
			return
		case reply := <-w.reopen:
			drain()
			flush()
			// The new file starts empty: the chain state beside it lets a
			// restart continue seq and prev across the rotation.
			if err := saveChain(w.path, flushed); err != nil {
				w.logger.Error("audit: cannot save the chain state; a restart after rotating the file will restart seq", "path", w.path, "err", err)
			}
			nf, err := openFile(w.path)
			if err != nil {
				// Keep writing to the old file rather than lose records.
				w.logger.Error("audit reopen failed; still writing to the previous file", "path", w.path, "err", err)
				reply <- err
				continue
			}
			_ = f.Sync()
			_ = f.Close()
			f = nf
			bw.Reset(f)
			reply <- nil
		}
	}
}

// SanitizeHost reduces a raw host string to something that can carry no
// query string, path, credential or header: the part after any userinfo '@'
// and before the first '/', '?', '#' or whitespace, lower-cased, at most 253
// bytes.
func SanitizeHost(raw string) string {
	if i := strings.LastIndexByte(raw, '@'); i >= 0 {
		raw = raw[i+1:]
	}
	// A byte loop, not strings.IndexAny: this runs twice per request and
	// IndexAny builds its set on every call.
cut:
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '/', '?', '#', '\\', ' ', '\t', '\r', '\n':
			raw = raw[:i]
			break cut
		}
	}
	if len(raw) > 253 {
		raw = raw[:253]
	}
	return strings.ToLower(raw)
}

// SanitizeMethod returns m when it is a plausible HTTP method token (A-Z,
// at most 16 bytes), else "" — nothing else of a request may enter the audit.
func SanitizeMethod(m string) string {
	if len(m) == 0 || len(m) > 16 {
		return ""
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if (c < 'A' || c > 'Z') && c != '-' && c != '_' {
			return ""
		}
	}
	return m
}
