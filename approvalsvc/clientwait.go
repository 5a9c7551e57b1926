package approvalsvc

// What a requester is told (SPEC §3.7 and §5): it waits for its review at
// most approvals.client_wait (or its x-proxy-approval-wait), then leaves
// with "pending" and the approval id while the review stays open; a later
// identical request joins the open review, or gets the result of a review
// decided after every requester had left (once, within leftResultTTL).

import (
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
)

// OutcomePending is the result of a requester that stopped waiting while
// its review stays open (never an outcome of the review itself).
const OutcomePending = "pending"

// Client outcomes (SPEC §3.7 x-proxy-approval).
const (
	ClientPending     = "pending"
	ClientDenied      = "denied"
	ClientTimedOut    = "timed_out"
	ClientOverloaded  = "overloaded"
	ClientUnavailable = "unavailable"
)

// EventApprovalWaiting tells the page that a pending review's requesters
// all left, or one came back: {"id","waiting"}.
const EventApprovalWaiting = "approval_waiting"

// leftResultTTL is how long the result of a review decided after every
// requester left waits for an identical request (SPEC §3.7: an allow_once
// then admits one identical request within 60 s).
const leftResultTTL = 60 * time.Second

// leftResult is a finished review nobody was waiting for.
type leftResult struct {
	r     result
	until time.Time
}

// clientWait is how long a network request waits for its review: the
// configured client_wait, shortened by the request's x-proxy-approval-wait.
func (s *Service) clientWait(req hostpolicy.Request) time.Duration {
	w := s.clientWaitMax
	if req.HasApprovalWait && req.ApprovalWait < w {
		w = max(req.ApprovalWait, 0)
	}
	return w
}

// clientOutcome is what the requester of a refused decision is told.
func clientOutcome(r result) string {
	switch {
	case r.pending:
		return ClientPending
	case r.overloaded:
		return ClientOverloaded
	case r.unavailable:
		return ClientUnavailable
	case r.outcome == OutcomeTimeout:
		return ClientTimedOut
	}
	return ClientDenied
}

// keepLeft keeps the result of a network review that ended with no
// requester waiting, for the next identical request. Call with flightMu
// held. Bounded by max_pending entries: when full of live entries the
// result is dropped and a retry opens a new review (nothing is allowed
// that was not decided).
func (s *Service) keepLeft(key cacheKey, r result) {
	if key.kind != KindNetwork || s.ctx.Err() != nil || r.outcome == OutcomeCancelled {
		return
	}
	now := s.now()
	if len(s.left) >= s.maxPending {
		for k, e := range s.left {
			if !now.Before(e.until) {
				delete(s.left, k)
			}
		}
		if len(s.left) >= s.maxPending {
			return
		}
	}
	s.left[key] = leftResult{r: r, until: now.Add(leftResultTTL)}
}

// takeLeft hands out (once) the result kept for key. Call with flightMu
// held.
func (s *Service) takeLeft(key cacheKey) (result, bool) {
	e, ok := s.left[key]
	if !ok {
		return result{}, false
	}
	delete(s.left, key)
	if !s.now().Before(e.until) {
		return result{}, false
	}
	return e.r, true
}

// publishWaiting tells the page whether anyone waits on f's review.
func (s *Service) publishWaiting(f *flight, n int) {
	s.bus.publish(EventApprovalWaiting, struct {
		ID      string `json:"id"`
		Waiting int    `json:"waiting"`
	}{f.id, n})
}
