package credentials

import (
	"net/http"
	"slices"
	"strings"
)

// TooManyCandidates is the credential name of a cluster-mode block of a
// request holding more prefix-anchored candidates than maxAnchored: they
// could not all be resolved with one bounded lookup.
const TooManyCandidates = "(unverified: too many candidate placeholders)"

// maxAnchored bounds the prefix-anchored candidates one request may send to
// the cluster store (remoteCandidates).
const maxAnchored = 32

// scanner is one decision's walk over a request's fields (Rewrite,
// CheckTrailer). The caller holds the broker's read lock around fields.
type scanner struct {
	b            *Broker
	set          *Set
	execID, host string
	remote       bool // a cluster store answers for bodies not held here

	blocked  string    // the credential of a block
	own      []binding // the execution's own placeholders toward their host
	misses   []string  // candidates for the cluster store
	lens     []int     // remote: the configured body lengths
	anchored int       // remote: prefix-anchored candidates so far
}

// fields scans the request line (or "") and every field name and value.
// Names are matched case-insensitively: HTTP/1.1 parsing canonicalises
// them and HTTP/2 lower-cases them, so the bytes sent may differ in case
// from what the scanner sees.
func (sc *scanner) fields(h http.Header, line string) bool {
	if line != "" && !sc.scan(line, false) {
		return false
	}
	for k, vs := range h {
		if !sc.scan(k, true) {
			return false
		}
		for _, v := range vs {
			if !sc.scan(v, false) {
				return false
			}
		}
	}
	return true
}

func (sc *scanner) scan(s string, name bool) bool {
	if !sc.b.index.find(s, name, sc.isLive, sc.check) {
		return false
	}
	if sc.remote {
		return sc.remoteCandidates(s)
	}
	return true
}

func (sc *scanner) isLive(w string) bool {
	_, ok := sc.b.byBody[w]
	return ok
}

// check judges one live body found in the request.
func (sc *scanner) check(body string) bool {
	bd, ok := sc.b.byBody[body]
	if !ok {
		return true
	}
	c := sc.set.byName[bd.cred]
	if c == nil {
		return true // a credential removed by a reload: dead
	}
	if bd.exec != sc.execID || !c.matches(sc.host) {
		sc.blocked = bd.cred
		return false
	}
	if !slices.Contains(sc.own, bd) {
		sc.own = append(sc.own, bd)
	}
	return true
}

// remoteCandidates collects the windows of s that go to the cluster store
// when this replica does not hold them. Not every window: that would make
// the one lookup per request as large as the request. The rule:
//
//   - the first and the last n characters of each maximal base62 run of at
//     least n characters (n a configured body length): a body with or
//     without its prefix, glued to letters on at most one side;
//   - the n characters after each occurrence, inside a run, of a prefix's
//     base62 tail (the part after its last other character, e.g. "sk" of
//     "x-sk"; none for "sk-"): a body glued on both sides behind its
//     prefix. At most maxAnchored such windows per request; beyond that
//     the request is blocked (TooManyCandidates), fail closed.
//
// So a body glued on both sides without its prefix is found only when the
// replica holds it (minted here, or kept after an earlier lookup).
func (sc *scanner) remoteCandidates(s string) bool {
	if sc.lens == nil {
		sc.lens = setLens(sc.set, nil)
	}
	Scan(s, sc.lens, sc.miss)
	for _, c := range sc.set.creds {
		tail := prefixTail(c.spec.PlaceholderPrefix)
		n := c.spec.PlaceholderLength - len(c.spec.PlaceholderPrefix)
		if tail == "" || n <= 0 {
			continue
		}
		ok := runs(s, len(tail)+n, func(i, j int) bool {
			// Occurrences of tail in s[i:j] followed by n run characters.
			for off := i; off+len(tail)+n <= j; {
				k := strings.Index(s[off:j-n], tail)
				if k < 0 {
					break
				}
				start := off + k + len(tail)
				if sc.anchored++; sc.anchored > maxAnchored {
					sc.blocked = TooManyCandidates
					return false
				}
				sc.miss(s[start : start+n])
				off += k + 1
			}
			return true
		})
		if !ok {
			return false
		}
	}
	return true
}

// prefixTail is the part of a placeholder prefix after its last non-base62
// character: what a body's base62 run begins with.
func prefixTail(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if !isBase62(p[i]) {
			return p[i+1:]
		}
	}
	return p
}

// miss records a candidate this replica does not hold.
func (sc *scanner) miss(body string) bool {
	if _, ok := sc.b.byBody[body]; ok {
		return true // held here: the sliding scan judged it
	}
	if !slices.Contains(sc.misses, body) {
		sc.misses = append(sc.misses, body)
	}
	return true
}

// holds reports whether s carries the placeholder bound to bd (held here,
// or among fetched, the bindings just read from the cluster store).
func (sc *scanner) holds(s string, bd binding, fetched map[string]binding) bool {
	for body, got := range fetched {
		if got == bd && strings.Contains(s, body) {
			return true
		}
	}
	b := sc.b
	found := false
	b.mu.RLock()
	b.index.find(s, false, sc.isLive, func(body string) bool {
		if b.byBody[body] == bd {
			found = true
			return false
		}
		return true
	})
	b.mu.RUnlock()
	return found
}
