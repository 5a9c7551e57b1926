package approvalsvc

// Single flight: concurrent requests with the same key wait on one review (SPEC §5 step 3).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"
)

// result is a finished review as every waiter sees it.
type result struct {
	allow      bool
	outcome    string
	reviewer   string
	approvalID string
	rationale  string
	risk       string
	persisted  bool
	// overloaded says no review was opened: max_pending or
	// max_pending_per_session was reached (reason approvals_overloaded).
	overloaded bool
	// unavailable says no review could be opened: the cluster store is
	// unreachable (reason approvals_unavailable).
	unavailable bool
	// pending says the requester stopped waiting (SPEC §3.7 client_wait)
	// while the review stays open: it is told "pending" and approvalID.
	pending bool
	// decided is the approval as finished (cluster mode shares it).
	decided Approval
}

type flight struct {
	done   chan struct{}
	res    result
	owners map[string]struct{} // execution ids of all waiters
	joined int                 // requests that joined this review
	// opened is closed once the review has its approval id and waits for
	// a reviewer (or has ended): a requester's wait (SPEC §3.7
	// client_wait) counts from then, so a gate's or hook's quick answer is
	// never reported as pending, and a pending id is always decidable.
	// id is set before it closes.
	opened chan struct{}
	id     string
	isOpen bool // under flightMu
	// waiting counts the requests waiting on the review now (the page's,
	// CLI's and API's "waiting"; SPEC §5).
	waiting atomic.Int32
	// finished is set under flightMu with res, before done closes.
	finished bool
}

// await joins the review in flight for key or starts one, and waits until it
// is decided (exec approvals: execwrap waits as long as the review).
func (s *Service) await(ctx context.Context, key cacheKey, ownerID string, check func() (result, bool), run func(ctx context.Context, f *flight) result) result {
	return s.awaitFor(ctx, key, ownerID, -1, check, run)
}

// awaitFor is await with the requester's wait bounded (SPEC §3.7): past
// wait (negative: none) after the review opened, the requester leaves with
// a pending result naming the approval while the review stays open.
//
// check runs under the flight lock before a new review starts, so a request
// that races with the end of a review sees the cache that review filled; so
// does the result of a review every requester had left (leftResult). The
// review runs on the service's context: a waiter that gives up never aborts
// it for others, and the review keeps its slot (it stays decidable) until
// it ends.
//
// Reviews in progress are bounded (SPEC §5): a request that would open one
// more than maxPending in all, or than maxPerSession in its session, opens
// none and gets an overloaded denial at once. Joining a review already in
// flight is always allowed: it adds no review.
func (s *Service) awaitFor(ctx context.Context, key cacheKey, ownerID string, wait time.Duration, check func() (result, bool), run func(ctx context.Context, f *flight) result) result {
	s.flightMu.Lock()
	f, ok := s.flights[key]
	if !ok {
		if r, hit := check(); hit {
			s.flightMu.Unlock()
			return r
		}
		if r, hit := s.takeLeft(key); hit {
			s.flightMu.Unlock()
			return r
		}
		if r, full := s.overloaded(key.session); full {
			s.flightMu.Unlock()
			return r
		}
		f = &flight{done: make(chan struct{}), opened: make(chan struct{}), owners: map[string]struct{}{}}
		s.flights[key] = f
		s.inSession[key.session]++
	}
	if ownerID != "" {
		f.owners[ownerID] = struct{}{}
	}
	f.joined++
	first := f.waiting.Add(1) == 1 && f.isOpen
	s.flightMu.Unlock()
	if first {
		s.publishWaiting(f, 1)
	}
	if !ok {
		go func() {
			r := run(s.ctx, f)
			s.flightMu.Lock()
			delete(s.flights, key)
			if n := s.inSession[key.session] - 1; n > 0 {
				s.inSession[key.session] = n
			} else {
				delete(s.inSession, key.session)
			}
			f.res, f.finished = r, true
			if f.waiting.Load() == 0 {
				s.keepLeft(key, r)
			}
			if !f.isOpen {
				f.id, f.isOpen = r.approvalID, true
				close(f.opened)
			}
			s.flightMu.Unlock()
			close(f.done)
		}()
	}
	opened := f.opened
	if wait < 0 {
		opened = nil
	}
	var expired <-chan time.Time
	for {
		select {
		case <-f.done:
			return f.res
		case <-ctx.Done():
			return s.leave(f, result{outcome: OutcomeCancelled, reviewer: byPolicy, rationale: "the request ended while its approval was pending"})
		case <-opened:
			opened = nil
			t := time.NewTimer(wait)
			defer t.Stop()
			expired = t.C
		case <-expired:
			return s.leave(f, result{pending: true, approvalID: f.id, outcome: OutcomePending, reviewer: byPolicy,
				rationale: "the review is still open: retry the same request to join it or get its decision"})
		}
	}
}

// openFlight records that f's review has approval id and now waits for a
// reviewer (listed in the human queue, or asked of the Guardian); its
// requesters' waits start. Gates and hooks come before: their quick
// answers are never reported as pending. f may be nil (no requester).
func (s *Service) openFlight(f *flight, id string) {
	if f == nil {
		return
	}
	s.flightMu.Lock()
	if f.isOpen {
		s.flightMu.Unlock()
		return
	}
	f.id, f.isOpen = id, true
	close(f.opened)
	s.flightMu.Unlock()
}

// leave takes a requester off f and returns r — or f's result when the
// review ended meanwhile (then the requester is answered with it, and no
// result is left behind for a retry).
func (s *Service) leave(f *flight, r result) result {
	s.flightMu.Lock()
	if f.finished {
		s.flightMu.Unlock()
		return f.res
	}
	last := f.waiting.Add(-1) == 0 && f.isOpen
	s.flightMu.Unlock()
	if last {
		s.publishWaiting(f, 0)
	}
	return r
}

// flightOwners returns the execution ids waiting on f.
func (s *Service) flightOwners(f *flight) []string {
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	out := make([]string, 0, len(f.owners))
	for id := range f.owners {
		out = append(out, id)
	}
	return out
}

// newID returns a random approval id.
func newID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand never fails on Linux; a fixed id would merge reviews.
		panic(err)
	}
	return "apv_" + hex.EncodeToString(b[:])
}

// overloaded reports whether one more review in session would pass a bound,
// and the denial to answer then. Call with flightMu held.
func (s *Service) overloaded(session string) (result, bool) {
	var why string
	switch {
	case len(s.flights) >= s.maxPending:
		why = fmt.Sprintf("%d reviews are pending (approvals.max_pending); try again once the reviewer has decided some", len(s.flights))
	case s.inSession[session] >= s.maxPerSession:
		why = fmt.Sprintf("%d reviews are pending in this session (approvals.max_pending_per_session); try again once the reviewer has decided some", s.inSession[session])
	default:
		return result{}, false
	}
	return result{outcome: OutcomeDeny, reviewer: byPolicy, rationale: "approvals_overloaded: " + why, overloaded: true}, true
}

// PendingReviews returns the reviews in progress: in all and per session.
func (s *Service) PendingReviews() (total int, perSession map[string]int) {
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	perSession = make(map[string]int, len(s.inSession))
	for k, v := range s.inSession {
		perSession[k] = v
	}
	return len(s.flights), perSession
}
