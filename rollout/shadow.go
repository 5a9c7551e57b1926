package rollout

import (
	"encoding/json"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/netproxy/netproxy/hostpolicy"
)

// DefaultMaxShadowHosts bounds the per-host summary of GET /api/shadow.
const DefaultMaxShadowHosts = 1000

// maxHostLen is the longest DNS name; longer hosts are summarised as other.
const maxHostLen = 253

// OtherHost is the summary row of requests whose host is not tracked.
const OtherHost = "other"

// ShadowMeter is where disagreements are counted (a *metrics.Metrics).
type ShadowMeter interface {
	ShadowDecision(live, shadow string)
}

// shadowState is one loaded [shadow] candidate: compiled, or the error
// that kept it from compiling.
type shadowState struct {
	path   string
	snap   *hostpolicy.Snapshot
	err    string
	loaded time.Time
}

// Shadow holds the candidate policy and the summary of its
// disagreements. The candidate is swapped atomically on reload.
type Shadow struct {
	state atomic.Pointer[shadowState]
	meter ShadowMeter
	now   func() time.Time

	// mu serialises admission into the bounded host summary.
	mu    sync.Mutex
	hosts *lru.Cache[string, *hostRow]
	max   int
	other *hostRow // guarded by mu
	total atomic.Uint64
}

// hostRow counts one host's disagreements.
type hostRow struct {
	mu      sync.Mutex
	flips   [3][3]uint64 // [live][shadow] by verdictIndex
	reasons map[reasonKey]uint64
	last    time.Time
}

// reasonKey is the shadow policy's reason and pattern.
type reasonKey struct {
	reason  hostpolicy.Reason
	pattern string
}

// verdicts are the decision values, indexed as hostRow.flips is.
var verdicts = [3]hostpolicy.Verdict{hostpolicy.Allow, hostpolicy.Deny, hostpolicy.Ask}

func verdictIndex(v hostpolicy.Verdict) int {
	switch v {
	case hostpolicy.Allow:
		return 0
	case hostpolicy.Ask:
		return 2
	}
	return 1
}

// NewShadow returns an empty Shadow (no candidate); max ≤ 0 means
// DefaultMaxShadowHosts.
func NewShadow(meter ShadowMeter, max int) *Shadow {
	if max <= 0 {
		max = DefaultMaxShadowHosts
	}
	c, err := lru.New[string, *hostRow](max)
	if err != nil {
		panic("rollout: shadow host LRU: " + err.Error())
	}
	return &Shadow{meter: meter, hosts: c, max: max, other: &hostRow{}, now: time.Now}
}

// Set installs a compiled candidate from path (nil snap with path ""
// removes the shadow policy). The summary restarts: it describes the
// current candidate.
func (sh *Shadow) Set(path string, snap *hostpolicy.Snapshot) {
	if path == "" || snap == nil {
		sh.state.Store(nil)
	} else {
		sh.state.Store(&shadowState{path: path, snap: snap, loaded: sh.now()})
	}
	sh.reset()
}

// SetError records that the candidate at path did not load: no shadow
// evaluation runs until a reload compiles one.
func (sh *Shadow) SetError(path string, err error) {
	sh.state.Store(&shadowState{path: path, err: err.Error(), loaded: sh.now()})
	sh.reset()
}

func (sh *Shadow) reset() {
	sh.mu.Lock()
	sh.hosts.Purge()
	sh.other = &hostRow{}
	sh.total.Store(0)
	sh.mu.Unlock()
}

// candidate returns the compiled candidate, or nil.
func (sh *Shadow) candidate() *hostpolicy.Snapshot {
	if sh == nil {
		return nil
	}
	if st := sh.state.Load(); st != nil {
		return st.snap
	}
	return nil
}

// record counts one disagreement.
func (sh *Shadow) record(host string, live, shadow hostpolicy.Decision) {
	sh.total.Add(1)
	if sh.meter != nil {
		sh.meter.ShadowDecision(string(live.Verdict), string(shadow.Verdict))
	}
	row := sh.row(host)
	key := reasonKey{shadow.Reason, shadow.Pattern}
	now := sh.now()
	row.mu.Lock()
	if row.reasons == nil {
		row.reasons = map[reasonKey]uint64{}
	}
	row.flips[verdictIndex(live.Verdict)][verdictIndex(shadow.Verdict)]++
	if _, ok := row.reasons[key]; ok || len(row.reasons) < maxReasonsPerHost {
		row.reasons[key]++
	}
	row.last = now
	row.mu.Unlock()
}

// maxReasonsPerHost bounds the distinct reason|pattern pairs kept per host.
const maxReasonsPerHost = 16

func (sh *Shadow) row(host string) *hostRow {
	if host != "" && len(host) <= maxHostLen {
		if r, ok := sh.hosts.Get(host); ok {
			return r
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if host == "" || len(host) > maxHostLen {
		return sh.other
	}
	if r, ok := sh.hosts.Get(host); ok {
		return r
	}
	if sh.hosts.Len() >= sh.max {
		// Bounded like denied_hosts_total: a flood of new hosts lands in
		// "other" instead of pushing the tracked ones out.
		return sh.other
	}
	r := &hostRow{}
	sh.hosts.Add(host, r)
	return r
}

// Summary is GET /api/shadow.
type Summary struct {
	// Status: "off" (no [shadow] configured), "active", or "error" (the
	// candidate did not load; Error says why).
	Status        string       `json:"status"`
	Config        string       `json:"config,omitempty"`
	Error         string       `json:"error,omitempty"`
	Loaded        *time.Time   `json:"loaded,omitempty"`
	Disagreements uint64       `json:"disagreements"`
	Hosts         []HostFlips  `json:"hosts"`
	MaxHosts      int          `json:"max_hosts"`
	Other         *HostFlips   `json:"other,omitempty"`
	Flips         []FlipCounts `json:"-"`
}

// HostFlips is one host's disagreements.
type HostFlips struct {
	Host        string         `json:"host"`
	AllowBlock  uint64         `json:"allow_to_block"`
	BlockAllow  uint64         `json:"block_to_allow"`
	Flips       []FlipCounts   `json:"flips"`
	Reasons     []ReasonCounts `json:"reasons"`
	LastSeen    time.Time      `json:"last_seen"`
	totalWeight uint64
}

// FlipCounts counts requests decided live one way and shadow another.
type FlipCounts struct {
	Live   string `json:"live"`
	Shadow string `json:"shadow"`
	Count  uint64 `json:"count"`
}

// ReasonCounts counts the shadow policy's reason and pattern.
type ReasonCounts struct {
	Reason  string `json:"reason"`
	Pattern string `json:"pattern,omitempty"`
	Count   uint64 `json:"count"`
}

// Summary returns the current state and per-host disagreements, hosts
// with the most disagreements first.
func (sh *Shadow) Summary() Summary {
	out := Summary{Status: "off", Hosts: []HostFlips{}, MaxHosts: sh.max}
	st := sh.state.Load()
	if st != nil {
		out.Config = st.path
		t := st.loaded.UTC()
		out.Loaded = &t
		if st.err != "" {
			out.Status, out.Error = "error", st.err
		} else {
			out.Status = "active"
		}
	}
	out.Disagreements = sh.total.Load()
	for _, host := range sh.hosts.Keys() {
		r, ok := sh.hosts.Peek(host)
		if !ok {
			continue
		}
		if hf, any := r.flipsOf(host); any {
			out.Hosts = append(out.Hosts, hf)
		}
	}
	sh.mu.Lock()
	other := sh.other
	sh.mu.Unlock()
	if hf, any := other.flipsOf(OtherHost); any {
		out.Other = &hf
	}
	sort.Slice(out.Hosts, func(i, j int) bool {
		if out.Hosts[i].totalWeight != out.Hosts[j].totalWeight {
			return out.Hosts[i].totalWeight > out.Hosts[j].totalWeight
		}
		return out.Hosts[i].Host < out.Hosts[j].Host
	})
	return out
}

func (r *hostRow) flipsOf(host string) (HostFlips, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hf := HostFlips{Host: host, LastSeen: r.last.UTC(), Flips: []FlipCounts{}, Reasons: []ReasonCounts{}}
	for i, row := range r.flips {
		for j, n := range row {
			if n == 0 {
				continue
			}
			hf.Flips = append(hf.Flips, FlipCounts{Live: string(verdicts[i]), Shadow: string(verdicts[j]), Count: n})
			hf.totalWeight += n
			switch {
			case i == 0 && j != 0:
				hf.AllowBlock += n
			case i != 0 && j == 0:
				hf.BlockAllow += n
			}
		}
	}
	if hf.totalWeight == 0 {
		return HostFlips{}, false
	}
	for k, n := range r.reasons {
		hf.Reasons = append(hf.Reasons, ReasonCounts{Reason: string(k.reason), Pattern: k.pattern, Count: n})
	}
	sort.Slice(hf.Reasons, func(i, j int) bool {
		if hf.Reasons[i].Count != hf.Reasons[j].Count {
			return hf.Reasons[i].Count > hf.Reasons[j].Count
		}
		return hf.Reasons[i].Reason+hf.Reasons[i].Pattern < hf.Reasons[j].Reason+hf.Reasons[j].Pattern
	})
	return hf, true
}

// ShadowAPI serves GET /api/shadow (admin listener, bearer token).
func (e *Evaluator) ShadowAPI() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sum := Summary{Status: "off", Hosts: []HostFlips{}}
		if e.shadow != nil {
			sum = e.shadow.Summary()
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(sum)
	})
}
