package settings

import (
	"strings"
	"testing"
	"time"
)

func TestWithDefaultsIsValid(t *testing.T) {
	s := Settings{}.WithDefaults()
	if errs := s.Validate(); len(errs) != 0 {
		t.Fatalf("defaults invalid: %v", errs)
	}
	if s.Reviewer != ReviewerUser || s.Policy != "on-request" || s.Timeout != DefaultReviewTimeout || s.ClientWait != 25*time.Second ||
		s.MaxPending != 1000 || s.MaxPendingPerSession != 100 {
		t.Fatalf("defaults: %+v", s)
	}
}

func TestValidateNamesKeys(t *testing.T) {
	s := Settings{Reviewer: "robot", Policy: "sometimes", Timeout: -time.Second, ClientWait: -time.Second,
		Hooks: []Hook{{Command: []string{"/h"}}, {Timeout: -1}}, MaxPending: 0, MaxPendingPerSession: -3}
	var keys []string
	for _, e := range s.Validate() {
		keys = append(keys, e.Key)
	}
	want := "reviewer policy timeout client_wait hooks[1].command hooks[1].timeout max_pending max_pending_per_session"
	if got := strings.Join(keys, " "); got != want {
		t.Fatalf("keys %q, want %q", got, want)
	}
	if errs := (Settings{Reviewer: "user", Policy: "never", Timeout: time.Second, ClientWait: time.Second, MaxPending: 2, MaxPendingPerSession: 3}).Validate(); len(errs) != 1 || errs[0].Key != "max_pending_per_session" {
		t.Fatalf("per-session above total: %v", errs)
	}
}
