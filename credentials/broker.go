package credentials

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/hostpolicy/hostname"
)

// ReasonMisuse is the block reason of a live placeholder seen toward a host
// it does not belong to, or on another execution's connection.
const ReasonMisuse = hostpolicy.ReasonCredentialMisuse

// secret holds a secret value behind a function, so that even fmt's
// reflection over an unexported field prints an address, never the value;
// its own methods print "[redacted]". Only the broker's injection calls get.
type secret struct{ get func() string }

func newSecret(v string) secret { return secret{get: func() string { return v }} }

func (secret) String() string               { return "[redacted]" }
func (secret) GoString() string             { return "[redacted]" }
func (secret) LogValue() slog.Value         { return slog.StringValue("[redacted]") }
func (secret) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }
func (secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }

type credential struct {
	spec     Spec
	patterns []hostname.Pattern
	secret   secret
}

// matches reports whether the normalised host is one the secret belongs to.
func (c *credential) matches(host string) bool {
	for _, p := range c.patterns {
		if p.Match(host) {
			return true
		}
	}
	return false
}

// Set is a loaded, immutable list of credentials with their secrets.
type Set struct {
	creds  []*credential
	byName map[string]*credential
}

// Len is the number of credentials.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.creds)
}

// Names are the credentials' names in configured order.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	out := make([]string, len(s.creds))
	for i, c := range s.creds {
		out[i] = c.spec.Name
	}
	return out
}

// Sources are where Load reads secrets (os.LookupEnv and os.ReadFile
// unless a test supplies others).
type Sources struct {
	LookupEnv func(string) (string, bool)
	ReadFile  func(string) ([]byte, error)
}

// withDefaults fills what src leaves nil with the process's environment
// and file system.
func (src Sources) withDefaults() Sources {
	if src.LookupEnv == nil {
		src.LookupEnv = os.LookupEnv
	}
	if src.ReadFile == nil {
		src.ReadFile = os.ReadFile
	}
	return src
}

// Load checks every spec and reads every secret. An error names the
// credential and its key (credentials[i] "name": secret_env: …) and never
// contains any part of a secret.
func Load(specs []Spec, src Sources) (*Set, error) {
	src = src.withDefaults()
	set := &Set{byName: map[string]*credential{}}
	var errs []error
	for i, raw := range specs {
		where := fmt.Sprintf("credentials[%d] %q", i, raw.Name)
		if kes := raw.Check(); len(kes) > 0 {
			for _, ke := range kes {
				errs = append(errs, fmt.Errorf("%s: %s", where, ke.Error()))
			}
			continue
		}
		s := raw.Normalized()
		c := &credential{spec: s}
		for _, h := range s.Hosts {
			p, _ := HostPattern(h) // checked above
			c.patterns = append(c.patterns, p)
		}
		v, err := readSecret(s, src)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		c.secret = newSecret(v)
		set.creds = append(set.creds, c)
		set.byName[s.Name] = c
	}
	for _, cf := range Conflicts(specs) {
		if cf.HostIndex < 0 {
			errs = append(errs, fmt.Errorf("credentials[%d] %q: name: already used by credentials[%d]", cf.Second, cf.Pattern, cf.First))
			continue
		}
		errs = append(errs, fmt.Errorf("credentials[%d] %q: hosts[%d]: %q is already claimed for header %s by credentials[%d]",
			cf.Second, specs[cf.Second].Name, cf.HostIndex, cf.Pattern, cf.Header, cf.First))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return set, nil
}

// ReadSecret reads one secret from the variable env or, when env is "",
// the file (trailing blanks and newlines dropped), as [[credentials]] do;
// used for [[proxy_auth.clients]] too. An error names the key
// (secret_env / secret_file) and the OS error, never the content.
func ReadSecret(env, file string, src Sources) (string, error) {
	return readSecret(Spec{SecretEnv: env, SecretFile: file}, src.withDefaults())
}

func readSecret(s Spec, src Sources) (string, error) {
	var v string
	if s.SecretEnv != "" {
		val, ok := src.LookupEnv(s.SecretEnv)
		if !ok || strings.TrimSpace(val) == "" {
			return "", fmt.Errorf("secret_env: variable %s is not set or empty in netproxy's environment", s.SecretEnv)
		}
		v = val
	} else {
		b, err := src.ReadFile(s.SecretFile)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the OS error only: never the content
			}
			return "", fmt.Errorf("secret_file: cannot read %s: %v", s.SecretFile, err)
		}
		v = strings.TrimRight(string(b), "\r\n \t")
		if strings.TrimSpace(v) == "" {
			return "", fmt.Errorf("secret_file: %s is empty", s.SecretFile)
		}
	}
	if strings.ContainsAny(v, "\r\n\x00") {
		return "", fmt.Errorf("%s: the secret holds CR, LF or NUL and cannot go in a header", keyOf(s))
	}
	return v, nil
}

func keyOf(s Spec) string {
	if s.SecretEnv != "" {
		return "secret_env"
	}
	return "secret_file"
}

// Placeholder is what one execution holds instead of a secret.
type Placeholder struct {
	Credential string `json:"credential"`
	Env        string `json:"env,omitempty"`
	Value      string `json:"value"`
}

type binding struct {
	exec string
	cred string
}

// Broker mints placeholders and decides requests against the current Set.
// It is safe for concurrent use.
type Broker struct {
	set atomic.Pointer[Set]

	mu     sync.RWMutex
	byBody map[string]binding        // random part of a placeholder → owner
	byExec map[string][]string       // execution → random parts
	index  bodyIndex                 // the live bodies, for the sliding scan (index.go)
	live   atomic.Int64              // live placeholders (fast path when 0)
	remote atomic.Pointer[remoteBox] // cluster store (remote.go); nil single node
	rand   func([]byte) error        // crypto/rand
}

// NewBroker returns a broker over set (nil: no credentials).
func NewBroker(set *Set) *Broker {
	b := &Broker{byBody: map[string]binding{}, byExec: map[string][]string{},
		rand: func(p []byte) error { _, err := rand.Read(p); return err }}
	if set == nil {
		set = &Set{byName: map[string]*credential{}}
	}
	b.set.Store(set)
	return b
}

// Swap installs a new Set (a reload). Placeholders already minted stay
// bound; those of a credential no longer configured are dead (never
// replaced, never blocked).
func (b *Broker) Swap(set *Set) {
	if set == nil {
		set = &Set{byName: map[string]*credential{}}
	}
	b.set.Store(set)
}

// Len is the number of configured credentials.
func (b *Broker) Len() int { return b.set.Load().Len() }

// Intercepts reports whether HTTPS toward the normalised host must be
// intercepted so that a credential can be injected or a placeholder seen.
func (b *Broker) Intercepts(host string) bool {
	for _, c := range b.set.Load().creds {
		if c.matches(host) {
			return true
		}
	}
	return false
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// Mint creates one placeholder per credential for the execution.
func (b *Broker) Mint(execID string) ([]Placeholder, error) {
	set := b.set.Load()
	if len(set.creds) == 0 || execID == "" {
		return nil, nil
	}
	out := make([]Placeholder, 0, len(set.creds))
	bodies := make([]string, 0, len(set.creds))
	for _, c := range set.creds {
		n := c.spec.PlaceholderLength - len(c.spec.PlaceholderPrefix)
		body, err := b.randomBody(n)
		if err != nil {
			return nil, fmt.Errorf("credentials: minting a placeholder: %w", err)
		}
		bodies = append(bodies, body)
		out = append(out, Placeholder{Credential: c.spec.Name, Env: c.spec.Env, Value: c.spec.PlaceholderPrefix + body})
	}
	b.mu.Lock()
	for i, body := range bodies {
		b.byBody[body] = binding{exec: execID, cred: out[i].Credential}
		b.index.add(body)
	}
	b.byExec[execID] = append(b.byExec[execID], bodies...)
	b.mu.Unlock()
	b.live.Add(int64(len(bodies)))
	b.publish(execID, out, bodies)
	return out, nil
}

func (b *Broker) randomBody(n int) (string, error) {
	buf := make([]byte, n)
	out := make([]byte, n)
	if err := b.rand(buf); err != nil {
		return "", err
	}
	for i := range out {
		// 248 = 4·62: reject bytes ≥ 248 to keep the draw uniform.
		for buf[i] >= 248 {
			var one [1]byte
			if err := b.rand(one[:]); err != nil {
				return "", err
			}
			buf[i] = one[0]
		}
		out[i] = base62[int(buf[i])%62]
	}
	return string(out), nil
}

// Forget drops an execution's placeholders (it ended): from now on they
// are dead strings.
func (b *Broker) Forget(execID string) {
	b.mu.Lock()
	bodies := b.byExec[execID]
	delete(b.byExec, execID)
	for _, body := range bodies {
		delete(b.byBody, body)
		b.index.remove(body)
	}
	b.mu.Unlock()
	b.live.Add(-int64(len(bodies)))
}

// Action is the broker's verdict on one request.
type Action int

const (
	// Pass: no placeholder of this request concerns the broker.
	Pass Action = iota
	// Injected: the credential's header now carries the secret.
	Injected
	// Block: a live placeholder goes toward a host it does not belong to
	// or comes from another execution; answer 403 credential_misuse.
	Block
)

func (a Action) String() string {
	switch a {
	case Injected:
		return "injected"
	case Block:
		return "block"
	}
	return "pass"
}

// Rewrite decides one request to the normalised host on a connection of
// execID ("" when unattributed): every live placeholder in the request
// line and in header names and values is found, wherever it sits (scan.go);
// one bound to another execution, or whose credential does not cover host,
// blocks the request (Block and that credential's name). Otherwise each
// credential covering host whose header carries its own placeholder gets
// that header set to its format with the secret (Injected). The body is
// not read; its trailers are CheckTrailer's.
func (b *Broker) Rewrite(execID, host string, header http.Header, requestLine string) (Action, string) {
	return b.decide(execID, host, header, requestLine, true)
}

// CheckTrailer decides a request's trailers, known only once its body has
// been read: Block (and the credential's name) on the same terms as
// Rewrite, else Pass. Nothing is injected into a trailer.
func (b *Broker) CheckTrailer(execID, host string, trailer http.Header) (Action, string) {
	if len(trailer) == 0 {
		return Pass, ""
	}
	if act, name := b.decide(execID, host, trailer, "", false); act == Block {
		return Block, name
	}
	return Pass, ""
}

func (b *Broker) decide(execID, host string, header http.Header, requestLine string, inject bool) (Action, string) {
	if b == nil {
		return Pass, ""
	}
	rem := b.remoteStore()
	if b.live.Load() == 0 && rem == nil {
		return Pass, ""
	}
	set := b.set.Load()
	sc := scanner{b: b, set: set, execID: execID, host: host, remote: rem != nil}
	b.mu.RLock()
	ok := sc.fields(header, requestLine)
	b.mu.RUnlock()
	if !ok {
		return Block, sc.blocked
	}
	var fetched map[string]binding
	if len(sc.misses) > 0 {
		var blocked string
		if fetched, blocked, ok = b.resolveRemote(rem, set, execID, host, sc.misses, &sc.own); !ok {
			return Block, blocked
		}
	}
	if len(sc.own) == 0 || !inject {
		return Pass, ""
	}
	act := Pass
	for _, bd := range sc.own {
		c := set.byName[bd.cred]
		vs := header.Values(c.spec.Header)
		replaced := false
		for _, v := range vs {
			if sc.holds(v, bd, fetched) {
				replaced = true
				break
			}
		}
		if replaced {
			header.Set(c.spec.Header, strings.Replace(c.spec.Format, SecretMarker, c.secret.get(), 1))
			act = Injected
		}
	}
	return act, ""
}

// Scan finds candidate placeholder bodies in s: for every maximal run of
// base62 characters at least as long as a body length in lens, the run's
// first and last len characters are offered to visit (a body may follow
// an alphanumeric prefix or be followed by other characters). visit
// returns false to stop; Scan then returns false. It yields the cluster
// store's candidates (scan.go); live bodies held here are found anywhere
// by the index (index.go).
func Scan(s string, lens []int, visit func(body string) bool) bool {
	if len(lens) == 0 {
		return true
	}
	minLen := lens[0]
	for _, l := range lens {
		if l < minLen {
			minLen = l
		}
	}
	return runs(s, minLen, func(i, j int) bool {
		run := s[i:j]
		for _, l := range lens {
			if l > len(run) {
				continue
			}
			if !visit(run[len(run)-l:]) {
				return false
			}
			if l < len(run) && !visit(run[:l]) {
				return false
			}
		}
		return true
	})
}

func isBase62(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}
