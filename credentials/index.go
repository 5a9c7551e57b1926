package credentials

import "strings"

// The live-placeholder index: every window of a scanned string that could
// be a live body is found in one pass per distinct body length, whatever
// sits on either side of it (a prefix, letters glued on one or both sides).
//
// For each length n a rolling polynomial hash runs over the base62 runs of
// the text; a window is looked up in the body map only when its hash hits
// a counting filter over the live bodies' hashes (64 Ki one-byte slots):
// one multiply-add and one byte load per byte and length, and a map lookup
// for about live/65536 of the windows. A second filter over the bodies'
// lower-cased forms serves field names, which HTTP/1.1 parsing canonicalises
// and HTTP/2 lower-cases: a placeholder in a name is found case-insensitively.
// False positives only cost a lookup; a live body is never missed (its
// window hashes to a slot the body itself set).

const (
	hashBase   = 0x100000001b3 // odd: the rolling hash is a bijection per step
	filterBits = 16
	saturated  = 255 // a slot that reached it is never decremented again
)

// lenIndex is the filter of the live bodies of one length.
type lenIndex struct {
	n     int
	count int
	pow   uint64 // hashBase^n, to roll a byte out
	exact []uint8
	fold  []uint8
}

// bodyIndex is the set of lenIndex, one per live body length (a handful).
type bodyIndex struct {
	byLen []*lenIndex
	// byFold maps a lower-cased body to the live bodies that fold to it.
	byFold map[string][]string
}

func slot(h uint64) uint32 { return uint32((h * 0x9E3779B97F4A7C15) >> (64 - filterBits)) }

func lowerByte(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func hashOf(s string, fold bool) uint64 {
	var h uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if fold {
			c = lowerByte(c)
		}
		h = h*hashBase + uint64(c)
	}
	return h
}

func (x *bodyIndex) add(body string) {
	li := x.get(len(body))
	if li == nil {
		li = &lenIndex{n: len(body), pow: 1, exact: make([]uint8, 1<<filterBits), fold: make([]uint8, 1<<filterBits)}
		for i := 0; i < li.n; i++ {
			li.pow *= hashBase
		}
		x.byLen = append(x.byLen, li)
	}
	li.count++
	if e := &li.exact[slot(hashOf(body, false))]; *e < saturated {
		*e++
	}
	if f := &li.fold[slot(hashOf(body, true))]; *f < saturated {
		*f++
	}
	if x.byFold == nil {
		x.byFold = map[string][]string{}
	}
	low := strings.ToLower(body)
	x.byFold[low] = append(x.byFold[low], body)
}

func (x *bodyIndex) remove(body string) {
	li := x.get(len(body))
	if li == nil {
		return
	}
	if li.count--; li.count <= 0 {
		for i, l := range x.byLen {
			if l == li {
				x.byLen = append(x.byLen[:i], x.byLen[i+1:]...)
				break
			}
		}
	} else {
		if e := &li.exact[slot(hashOf(body, false))]; *e > 0 && *e < saturated {
			*e--
		}
		if f := &li.fold[slot(hashOf(body, true))]; *f > 0 && *f < saturated {
			*f--
		}
	}
	low := strings.ToLower(body)
	bs := x.byFold[low]
	for i, b := range bs {
		if b == body {
			bs = append(bs[:i:i], bs[i+1:]...)
			break
		}
	}
	if len(bs) == 0 {
		delete(x.byFold, low)
	} else {
		x.byFold[low] = bs
	}
}

func (x *bodyIndex) get(n int) *lenIndex {
	for _, l := range x.byLen {
		if l.n == n {
			return l
		}
	}
	return nil
}

// find offers visit every window of s that may be a live body: exact
// windows (fold false) whose hash hits the exact filter, or (fold true) the
// live bodies whose lower-cased form equals a window's. isLive decides an
// exact window. visit returns false to stop; find then returns false.
func (x *bodyIndex) find(s string, fold bool, isLive func(string) bool, visit func(body string) bool) bool {
	for _, li := range x.byLen {
		if !li.find(s, fold, x, isLive, visit) {
			return false
		}
	}
	return true
}

func (li *lenIndex) find(s string, fold bool, x *bodyIndex, isLive func(string) bool, visit func(string) bool) bool {
	n := li.n
	filter := li.exact
	if fold {
		filter = li.fold
	}
	return runs(s, n, func(i, j int) bool {
		var h uint64
		for k := i; k < i+n; k++ {
			h = h*hashBase + uint64(fbyte(s[k], fold))
		}
		for start := i; ; start++ {
			if filter[slot(h)] != 0 && !li.offer(s[start:start+n], fold, x, isLive, visit) {
				return false
			}
			if start+n >= j {
				return true
			}
			h = h*hashBase + uint64(fbyte(s[start+n], fold)) - uint64(fbyte(s[start], fold))*li.pow
		}
	})
}

// runs calls fn with the bounds of every maximal run of base62 characters
// in s at least minLen long; fn returns false to stop, and runs then
// returns false.
func runs(s string, minLen int, fn func(i, j int) bool) bool {
	for i := 0; i+minLen <= len(s); {
		if !isBase62(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isBase62(s[j]) {
			j++
		}
		if j-i >= minLen && !fn(i, j) {
			return false
		}
		i = j
	}
	return true
}

func fbyte(c byte, fold bool) byte {
	if fold {
		return lowerByte(c)
	}
	return c
}

func (li *lenIndex) offer(w string, fold bool, x *bodyIndex, isLive func(string) bool, visit func(string) bool) bool {
	if !fold {
		if isLive(w) {
			return visit(w)
		}
		return true
	}
	for _, body := range x.byFold[strings.ToLower(w)] {
		if !visit(body) {
			return false
		}
	}
	return true
}
