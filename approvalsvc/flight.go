package approvalsvc

// Single flight: concurrent requests with the same key wait on one review (SPEC §5 step 3).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
// the service's context: a waiter that gives up never aborts it for others.
func (s *Service) await(ctx context.Context, key cacheKey, ownerID string, check func() (result, bool), run func(ctx context.Context, f *flight) result) result {
	s.flightMu.Lock()
	f, ok := s.flights[key]
	if !ok {
		if r, hit := check(); hit {
			s.flightMu.Unlock()
			return r
		}
		f = &flight{done: make(chan struct{}), owners: map[string]struct{}{}}
		s.flights[key] = f
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
