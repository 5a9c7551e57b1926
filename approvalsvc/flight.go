package approvalsvc

// Single flight: concurrent requests with the same key wait on one review (SPEC §5 step 3).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
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
	// decided is the approval as finished (cluster mode shares it).
	decided Approval
}

type flight struct {
	done   chan struct{}
	res    result
	owners map[string]struct{} // execution ids of all waiters
	joined int                 // requests waiting on this review
}

// await joins the review in flight for key or starts one. check runs under
// the flight lock before a new review starts, so a request that races with
// the end of a review sees the cache that review filled. The review runs on
// the service's context: a waiter that gives up never aborts it for others,
// and the review keeps its slot (it stays decidable) until it ends.
//
// Reviews in progress are bounded (SPEC §5): a request that would open one
// more than maxPending in all, or than maxPerSession in its session, opens
// none and gets an overloaded denial at once. Joining a review already in
// flight is always allowed: it adds no review.
func (s *Service) await(ctx context.Context, key cacheKey, ownerID string, check func() (result, bool), run func(ctx context.Context, f *flight) result) result {
	s.flightMu.Lock()
	f, ok := s.flights[key]
	if !ok {
		if r, hit := check(); hit {
			s.flightMu.Unlock()
			return r
		}
		if r, full := s.overloaded(key.session); full {
			s.flightMu.Unlock()
			return r
		}
		f = &flight{done: make(chan struct{}), owners: map[string]struct{}{}}
		s.flights[key] = f
		s.inSession[key.session]++
	}
	if ownerID != "" {
		f.owners[ownerID] = struct{}{}
	}
	f.joined++
	s.flightMu.Unlock()
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
			f.res = r
			s.flightMu.Unlock()
			close(f.done)
		}()
	}
	select {
	case <-f.done:
		return f.res
	case <-ctx.Done():
		return result{outcome: OutcomeCancelled, reviewer: byPolicy, rationale: "the request ended while its approval was pending"}
	}
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
