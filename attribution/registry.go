package attribution

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// ExecutionSpec is what a launcher tells the registry about a new execution.
type ExecutionSpec struct {
	SessionID     string   `json:"session_id"`
	EnvironmentID string   `json:"environment_id"`
	TurnID        string   `json:"turn_id,omitempty"`
	Command       []string `json:"command"`
	Cwd           string   `json:"cwd,omitempty"`
	// Optional narrowing of the approval service's settings for this execution.
	ApprovalPolicy string `json:"approval_policy,omitempty"`
	Reviewer       string `json:"reviewer,omitempty"`
	// Network optionally narrows the host-wide network policy for this
	// execution only (it can never widen it).
	Network *NetworkPolicy `json:"network,omitempty"`
	// Budgets optionally narrows the host-wide [budgets] for this
	// execution (SPEC §3.12; budget.go); a wider value is clamped.
	Budgets *BudgetLimits `json:"budgets,omitempty"`
}

// NetworkPolicy is a narrower network policy: the "network" object of
// POST /v1/executions and the body of PUT /v1/sessions/{id}/network.
// Entries use the list syntax of the host-wide policy; mode "limited"
// narrows a full host-wide mode. The proxy validates and compiles it
// (hostpolicy.BuildScope); this package only carries it.
type NetworkPolicy struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	Mode  string   `json:"mode,omitempty"`
}

// Clone returns a deep copy (nil for nil).
func (p *NetworkPolicy) Clone() *NetworkPolicy {
	if p == nil {
		return nil
	}
	return &NetworkPolicy{Allow: append([]string(nil), p.Allow...), Deny: append([]string(nil), p.Deny...), Mode: p.Mode}
}

// Execution is one registered, active command execution. It never holds the
// token, so it is safe to log and to return from APIs.
type Execution struct {
	ID             string   `json:"execution_id"`
	SessionID      string   `json:"session_id"`
	EnvironmentID  string   `json:"environment_id"`
	TurnID         string   `json:"turn_id,omitempty"`
	Command        []string `json:"command"`
	Cwd            string   `json:"cwd,omitempty"`
	ApprovalPolicy string   `json:"approval_policy,omitempty"`
	Reviewer       string   `json:"reviewer,omitempty"`
	// Network is the execution's narrower network policy (nil: none).
	Network *NetworkPolicy `json:"network,omitempty"`
	Started time.Time      `json:"started"`
	// Budgets are the execution's effective limits (its own within the
	// host-wide ones); nil: unbudgeted.
	Budgets *BudgetLimits `json:"budgets,omitempty"`
	// Budget counts the usage against Budgets (nil: unbudgeted). Shared
	// by every copy of this Execution; never marshalled.
	Budget *Budget `json:"-"`
}

// DefaultSession names the session and the environment that unattributed
// requests belong to (SPEC §4.3).
const DefaultSession = "default"

// Event is one line of an execution's NDJSON event stream.
type Event struct {
	Type       string    `json:"type"` // network_decision | denied_by_user | denied_by_policy | execution_ended
	Time       time.Time `json:"time"`
	Host       string    `json:"host,omitempty"`
	Port       uint16    `json:"port,omitempty"`
	Protocol   string    `json:"protocol,omitempty"`
	Decision   string    `json:"decision,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Source     string    `json:"source,omitempty"`
	ApprovalID string    `json:"approval_id,omitempty"`
	// Usage is the budgeted execution's usage after this event (SPEC
	// §3.12); omitted for an unbudgeted one.
	Usage *Usage `json:"usage,omitempty"`
}

// Event types.
const (
	EventNetworkDecision = "network_decision"
	EventDeniedByUser    = "denied_by_user"
	EventDeniedByPolicy  = "denied_by_policy"
	EventExecutionEnded  = "execution_ended"
)

// Change kinds passed to OnChange hooks.
const (
	ExecutionStarted = "execution_started"
	ExecutionEnded   = "execution_ended"
)

// subscriberBuffer bounds each event subscriber; a slow reader loses events
// rather than slowing the data path.
const subscriberBuffer = 256

// ErrInvalidSpec is returned by Register for a spec missing required fields.
var ErrInvalidSpec = errors.New("invalid execution")

type entry struct {
	exec     Execution
	tokenKey [32]byte
	subs     map[int]chan Event
}

// Registry holds the active executions. Tokens are kept only as SHA-256
// digests, so a memory dump of the registry does not reveal them.
type Registry struct {
	mu      sync.RWMutex
	byID    map[string]*entry
	byToken map[[32]byte]string
	nextSub int
	hooks   []func(kind string, e Execution)
	miss    func(tokenKey [32]byte) bool // cluster read-through; nil on one node
	now     func() time.Time
	// budgets are the host-wide [budgets] every new execution gets
	// (budget.go); nil: none.
	budgets atomic.Pointer[BudgetLimits]
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{
		byID:    make(map[string]*entry),
		byToken: make(map[[32]byte]string),
		now:     time.Now,
	}
}

// OnChange registers a hook called (outside the registry's lock) whenever an
// execution starts or ends. Hooks must not block.
func (r *Registry) OnChange(f func(kind string, e Execution)) {
	r.mu.Lock()
	r.hooks = append(r.hooks, f)
	r.mu.Unlock()
}

// Register adds an execution and returns it with its secret token (192
// random bits). The token is returned exactly once.
func (r *Registry) Register(spec ExecutionSpec) (Execution, string, error) {
	if spec.SessionID == "" {
		return Execution{}, "", errors.Join(ErrInvalidSpec, errors.New("session_id is required"))
	}
	if spec.EnvironmentID == "" {
		return Execution{}, "", errors.Join(ErrInvalidSpec, errors.New("environment_id is required"))
	}
	var idb [12]byte
	var tokb [24]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return Execution{}, "", err
	}
	if _, err := rand.Read(tokb[:]); err != nil {
		return Execution{}, "", err
	}
	token := base64.RawURLEncoding.EncodeToString(tokb[:])
	e := Execution{
		ID:             "exec_" + hex.EncodeToString(idb[:]),
		SessionID:      spec.SessionID,
		EnvironmentID:  spec.EnvironmentID,
		TurnID:         spec.TurnID,
		Command:        append([]string(nil), spec.Command...),
		Cwd:            spec.Cwd,
		ApprovalPolicy: spec.ApprovalPolicy,
		Reviewer:       spec.Reviewer,
		Network:        spec.Network.Clone(),
		Started:        r.now().UTC(),
	}
	r.attachBudget(&e, spec.Budgets)
	key := sha256.Sum256([]byte(token))
	r.mu.Lock()
	r.byID[e.ID] = &entry{exec: e, tokenKey: key, subs: make(map[int]chan Event)}
	r.byToken[key] = e.ID
	hooks := append([]func(string, Execution){}, r.hooks...)
	r.mu.Unlock()
	for _, h := range hooks {
		h(ExecutionStarted, e)
	}
	return e, token, nil
}

// Revoke ends an execution: its token is rejected from now on, its event
// subscribers get execution_ended and their streams close. It reports
// whether the execution was active.
func (r *Registry) Revoke(id string) bool {
	r.mu.Lock()
	en, ok := r.byID[id]
	if !ok {
		r.mu.Unlock()
		return false
	}
	delete(r.byID, id)
	delete(r.byToken, en.tokenKey)
	hooks := append([]func(string, Execution){}, r.hooks...)
	ended := Event{Type: EventExecutionEnded, Time: r.now().UTC()}
	for _, ch := range en.subs {
		select {
		case ch <- ended:
		default:
		}
		close(ch)
	}
	en.subs = nil
	r.mu.Unlock()
	for _, h := range hooks {
		h(ExecutionEnded, en.exec)
	}
	return true
}

// ByToken returns the active execution a token belongs to. A token not
// held here is asked of the miss resolver (cluster mode) once.
func (r *Registry) ByToken(token string) (Execution, bool) {
	key := sha256.Sum256([]byte(token))
	e, ok, miss := r.byKey(key)
	if ok || miss == nil || !miss(key) {
		return e, ok
	}
	e, ok, _ = r.byKey(key)
	return e, ok
}

func (r *Registry) byKey(key [32]byte) (Execution, bool, func([32]byte) bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	id, ok := r.byToken[key]
	if !ok {
		return Execution{}, false, r.miss
	}
	return r.byID[id].exec, true, nil
}

// Get returns an active execution by id.
func (r *Registry) Get(id string) (Execution, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	en, ok := r.byID[id]
	if !ok {
		return Execution{}, false
	}
	return en.exec, true
}

// Active returns every active execution, oldest first.
func (r *Registry) Active() []Execution {
	return r.filter(func(Execution) bool { return true })
}

// ActiveInEnvironment returns the active executions of one environment.
func (r *Registry) ActiveInEnvironment(env string) []Execution {
	return r.filter(func(e Execution) bool { return e.EnvironmentID == env })
}

// ActiveInSession returns the active executions of one session.
func (r *Registry) ActiveInSession(session string) []Execution {
	return r.filter(func(e Execution) bool { return e.SessionID == session })
}

func (r *Registry) filter(keep func(Execution) bool) []Execution {
	r.mu.RLock()
	out := make([]Execution, 0, len(r.byID))
	for _, en := range r.byID {
		if keep(en.exec) {
			out = append(out, en.exec)
		}
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Started.Equal(out[j].Started) {
			return out[i].Started.Before(out[j].Started)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Publish delivers ev to the subscribers of execution id without blocking;
// a subscriber whose buffer is full misses the event.
func (r *Registry) Publish(id string, ev Event) {
	if ev.Time.IsZero() {
		ev.Time = r.now().UTC()
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	en, ok := r.byID[id]
	if !ok {
		return
	}
	if en.exec.Budget != nil {
		u := en.exec.Budget.Usage()
		ev.Usage = &u
	}
	for _, ch := range en.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

// Subscribe returns a stream of execution id's events, a cancel function,
// and false when the execution is not active. The channel closes when the
// execution ends (after an execution_ended event) or cancel is called.
func (r *Registry) Subscribe(id string) (<-chan Event, func(), bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	en, ok := r.byID[id]
	if !ok {
		return nil, func() {}, false
	}
	n := r.nextSub
	r.nextSub++
	ch := make(chan Event, subscriberBuffer)
	en.subs[n] = ch
	var once sync.Once
	cancel := func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if cur, ok := r.byID[id]; ok && cur == en {
				if c, ok := en.subs[n]; ok {
					delete(en.subs, n)
					close(c)
				}
			}
		})
	}
	return ch, cancel, true
}
