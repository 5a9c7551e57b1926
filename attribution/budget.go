package attribution

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Egress budgets (SPEC §3.12): what one execution may send, receive, ask
// and reach over its lifetime. The registry keeps one *Budget per budgeted
// execution; the data path holds the pointer on the connection and counts
// with atomics (no lock per request). An execution without any limit has
// no *Budget at all: the data path's whole cost is a nil check, and its
// usage is not counted.
//
// An authenticated client (SPEC §4.4, clients.go) has its own *Budget under
// the same host-wide limits; the data path puts it on the connection for
// the client's requests, as it does an execution's.

// Budget limit names: the keys of [budgets], of "budgets" and "usage", and
// the limit label of netproxy_budget_exceeded_total.
const (
	LimitBytesOut = "bytes_out"
	LimitBytesIn  = "bytes_in"
	LimitRequests = "requests"
	LimitHosts    = "hosts"
)

// BudgetLimits are the four limits; 0 is unlimited. In JSON the byte
// limits take a number of bytes or a size string ("100MiB").
type BudgetLimits struct {
	BytesOut Size  `json:"bytes_out,omitempty"`
	BytesIn  Size  `json:"bytes_in,omitempty"`
	Requests int64 `json:"requests,omitempty"`
	Hosts    int64 `json:"hosts,omitempty"`
}

// IsZero reports whether no limit is set.
func (l BudgetLimits) IsZero() bool {
	return l.BytesOut == 0 && l.BytesIn == 0 && l.Requests == 0 && l.Hosts == 0
}

// Validate refuses negative limits, naming the key.
func (l BudgetLimits) Validate() error {
	var errs []error
	for _, f := range l.fields() {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative (0 or absent is unlimited)", f.name))
		}
	}
	return errors.Join(errs...)
}

type limitField struct {
	name string
	v    int64
}

func (l BudgetLimits) fields() [4]limitField {
	return [4]limitField{{LimitBytesOut, int64(l.BytesOut)}, {LimitBytesIn, int64(l.BytesIn)}, {LimitRequests, l.Requests}, {LimitHosts, l.Hosts}}
}

// Narrow returns the execution's own limits (l) within the host-wide ones:
// a limit the host sets and l leaves unlimited or sets wider takes the
// host's value; each wider one is clamped with a note (a narrower budget
// can never widen the host-wide one).
func (l BudgetLimits) Narrow(host BudgetLimits) (BudgetLimits, []string) {
	var notes []string
	clamp := func(name string, own, hw int64) int64 {
		switch {
		case hw == 0:
			return own
		case own == 0:
			return hw
		case own > hw:
			notes = append(notes, fmt.Sprintf("budgets.%s: %d is wider than the host-wide %d; the host-wide limit applies", name, own, hw))
			return hw
		}
		return own
	}
	out := BudgetLimits{
		BytesOut: Size(clamp(LimitBytesOut, int64(l.BytesOut), int64(host.BytesOut))),
		BytesIn:  Size(clamp(LimitBytesIn, int64(l.BytesIn), int64(host.BytesIn))),
		Requests: clamp(LimitRequests, l.Requests, host.Requests),
		Hosts:    clamp(LimitHosts, l.Hosts, host.Hosts),
	}
	return out, notes
}

// Usage is what a budgeted execution has used: the "usage" object of GET
// /v1/executions/{id} and of its events.
type Usage struct {
	BytesOut int64 `json:"bytes_out"`
	BytesIn  int64 `json:"bytes_in"`
	Requests int64 `json:"requests"`
	Hosts    int64 `json:"hosts"`
}

// Budget is one execution's limits and usage. Safe for concurrent use;
// nil means unbudgeted (every method is a no-op on nil).
type Budget struct {
	limits BudgetLimits

	bytesOut, bytesIn, requests, nhosts atomic.Int64
	// hosts is the set of distinct hosts admitted: a host seen before is
	// one lock-free Load; only a new host writes.
	hosts sync.Map // string → struct{}
}

// NewBudget returns the budget for limits, or nil when none is set.
func NewBudget(l BudgetLimits) *Budget {
	if l.IsZero() {
		return nil
	}
	return &Budget{limits: l}
}

// Limits returns the budget's limits.
func (b *Budget) Limits() BudgetLimits {
	if b == nil {
		return BudgetLimits{}
	}
	return b.limits
}

// Usage returns a snapshot of what has been used.
func (b *Budget) Usage() Usage {
	if b == nil {
		return Usage{}
	}
	return Usage{BytesOut: b.bytesOut.Load(), BytesIn: b.bytesIn.Load(), Requests: b.requests.Load(), Hosts: b.nhosts.Load()}
}

// Admit counts one request to host and reports the limit that refuses it
// ("" when admitted). A byte limit already reached refuses every new
// request; a refused request is not counted; a host seen before never
// counts again.
func (b *Budget) Admit(host string) string {
	if b == nil {
		return ""
	}
	if l := int64(b.limits.BytesOut); l > 0 && b.bytesOut.Load() >= l {
		return LimitBytesOut
	}
	if l := int64(b.limits.BytesIn); l > 0 && b.bytesIn.Load() >= l {
		return LimitBytesIn
	}
	if l := b.limits.Requests; l > 0 {
		if b.requests.Add(1) > l {
			b.requests.Add(-1)
			return LimitRequests
		}
	} else {
		b.requests.Add(1)
	}
	if _, seen := b.hosts.Load(host); seen {
		return ""
	}
	// Reserve a slot before publishing the host, so that concurrent new
	// hosts cannot together pass the limit.
	for {
		n := b.nhosts.Load()
		if l := b.limits.Hosts; l > 0 && n >= l {
			b.requests.Add(-1)
			return LimitHosts
		}
		if b.nhosts.CompareAndSwap(n, n+1) {
			break
		}
	}
	if _, raced := b.hosts.LoadOrStore(host, struct{}{}); raced {
		b.nhosts.Add(-1) // another request published it meanwhile
	}
	return ""
}

// AddOut counts n bytes relayed client → upstream and reports whether the
// bytes_out limit is now exceeded (the connection must close).
func (b *Budget) AddOut(n int64) bool {
	if b == nil {
		return false
	}
	v := b.bytesOut.Add(n)
	return b.limits.BytesOut > 0 && v > int64(b.limits.BytesOut)
}

// AddIn counts n bytes relayed upstream → client and reports whether the
// bytes_in limit is now exceeded.
func (b *Budget) AddIn(n int64) bool {
	if b == nil {
		return false
	}
	v := b.bytesIn.Add(n)
	return b.limits.BytesIn > 0 && v > int64(b.limits.BytesIn)
}

// Remaining returns how many more bytes may flow in a direction before its
// limit ("up": bytes_out, "down": bytes_in) and false when it has none.
// A relay copies at most this much before it looks again, so a single
// connection stops at the limit.
func (b *Budget) Remaining(up bool) (int64, bool) {
	if b == nil {
		return 0, false
	}
	l, used := int64(b.limits.BytesIn), b.bytesIn.Load()
	if up {
		l, used = int64(b.limits.BytesOut), b.bytesOut.Load()
	}
	if l == 0 {
		return 0, false
	}
	return max(l-used, 0), true
}

// Size is a byte count written as a number of bytes or a size string.
type Size int64

// UnmarshalJSON accepts a number of bytes or a size string (ParseSize).
func (s *Size) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		v, err := ParseSize(str)
		if err != nil {
			return err
		}
		*s = Size(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("want a number of bytes or a size string such as \"100MiB\", got %s", b)
	}
	*s = Size(n)
	return nil
}

// sizeUnits are the accepted suffixes: binary (KiB, MiB, GiB, TiB),
// decimal (KB, MB, GB, TB) and B; case-insensitive.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"b", 1},
}

// ParseSize parses a size: a whole number of bytes ("1048576"), or a
// number (a decimal fraction allowed) with a unit: KiB, MiB, GiB, TiB
// (powers of 1024), KB, MB, GB, TB (powers of 1000) or B; spaces between
// the number and the unit are allowed, case is ignored.
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	bad := fmt.Errorf("%q is not a size; write a number of bytes or a number with a unit such as \"100MiB\", \"1.5GB\" (KiB, MiB, GiB, TiB, KB, MB, GB, TB, B)", s)
	if t == "" {
		return 0, bad
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("%q: a size must not be negative", s)
		}
		if n > math.MaxInt64/mult {
			return 0, fmt.Errorf("%q is too large", s)
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, bad
	}
	if f < 0 {
		return 0, fmt.Errorf("%q: a size must not be negative", s)
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(v), nil
}

// SetBudgetLimits sets the host-wide [budgets] that executions registered
// from now on get (a reload does not change a running execution's).
func (r *Registry) SetBudgetLimits(l BudgetLimits) {
	r.budgets.Store(&l)
}

// BudgetLimits returns the host-wide [budgets].
func (r *Registry) BudgetLimits() BudgetLimits {
	if l := r.budgets.Load(); l != nil {
		return *l
	}
	return BudgetLimits{}
}

// attachBudget gives e its effective limits (own within the host-wide)
// and a fresh usage counter when any limit applies.
func (r *Registry) attachBudget(e *Execution, own *BudgetLimits) {
	var l BudgetLimits
	if own != nil {
		l = *own
	}
	eff, _ := l.Narrow(r.BudgetLimits())
	e.Budgets, e.Budget = nil, NewBudget(eff)
	if e.Budget != nil {
		e.Budgets = &eff
	}
}

// Usage returns an active execution's usage; ok is false when it is not
// active or has no budget.
func (r *Registry) Usage(id string) (Usage, bool) {
	e, ok := r.Get(id)
	if !ok || e.Budget == nil {
		return Usage{}, false
	}
	return e.Budget.Usage(), true
}

// checkBudgets validates the "budgets" object of POST /v1/executions and
// returns the notes of what the host-wide limits clamp; false: a 400 was
// written.
func (c *ControlServer) checkBudgets(w http.ResponseWriter, own *BudgetLimits) ([]string, bool) {
	if own == nil {
		return nil, true
	}
	if err := own.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, "budgets: "+strings.ReplaceAll(err.Error(), "\n", "; "))
		return nil, false
	}
	_, notes := own.Narrow(c.reg.BudgetLimits())
	return notes, true
}

// executionView is GET /v1/executions/{id}: the execution with its usage
// when it is budgeted.
type executionView struct {
	Execution
	Usage *Usage `json:"usage,omitempty"`
}

func withUsage(e Execution) executionView {
	v := executionView{Execution: e}
	if e.Budget != nil {
		u := e.Budget.Usage()
		v.Usage = &u
	}
	return v
}
