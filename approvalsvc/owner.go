package approvalsvc

// Owner resolution (SPEC §4.3): which execution, session and environment a request belongs to.

import (
	"errors"
	"fmt"

	"github.com/netproxy/netproxy/attribution"
)

// errAttribution is wrapped by owner-resolution failures (deny, no prompt).
var errAttribution = errors.New("attribution")

// requestSession resolves a request's owner (SPEC §4.3) and its session; an
// empty environment becomes the session's default one.
func (s *Service) requestSession(executionID, sessionID, environmentID string) (*attribution.Execution, *session, string, error) {
	owner, sessID, env, err := s.resolveOwner(executionID, sessionID, environmentID)
	if err != nil {
		return nil, nil, "", err
	}
	sess := s.session(sessID, owner)
	if env == "" {
		env = sess.defaultEnv
	}
	return owner, sess, env, nil
}

// ownerID is the execution id of owner, "" for none.
func ownerID(owner *attribution.Execution) string {
	if owner == nil {
		return ""
	}
	return owner.ID
}

// resolveOwner returns the owner execution (or nil), the session and the
// environment of req, exactly as SPEC §4.3 says.
func (s *Service) resolveOwner(executionID, sessionID, environmentID string) (*attribution.Execution, string, string, error) {
	switch {
	case executionID != "":
		if s.owners == nil {
			return nil, "", "", fmt.Errorf("%w: execution %s is not active", errAttribution, executionID)
		}
		e, ok := s.owners.Get(executionID)
		if !ok {
			return nil, "", "", fmt.Errorf("%w: execution %s is not active", errAttribution, executionID)
		}
		if environmentID != "" && environmentID != e.EnvironmentID {
			return nil, "", "", fmt.Errorf("%w: execution %s belongs to environment %q, not %q", errAttribution, executionID, e.EnvironmentID, environmentID)
		}
		if sessionID != "" && sessionID != e.SessionID {
			return nil, "", "", fmt.Errorf("%w: execution %s belongs to session %q, not %q", errAttribution, executionID, e.SessionID, sessionID)
		}
		return &e, e.SessionID, e.EnvironmentID, nil
	case environmentID != "":
		sess := sessionID
		if sess == "" {
			sess = DefaultSession
		}
		var owner *attribution.Execution
		if s.owners != nil {
			if list := s.owners.ActiveInEnvironment(environmentID); len(list) == 1 && (sessionID == "" || list[0].SessionID == sessionID) {
				owner = &list[0]
			}
		}
		return owner, sess, environmentID, nil
	default:
		sess := sessionID
		if sess == "" {
			sess = DefaultSession
		}
		if s.owners == nil {
			return nil, sess, "", nil
		}
		list := s.owners.ActiveInSession(sess)
		switch len(list) {
		case 0:
			return nil, sess, "", nil // the environment falls back to the session default
		case 1:
			return &list[0], sess, list[0].EnvironmentID, nil
		default:
			return nil, "", "", fmt.Errorf("%w: %d active executions in session %q and the request names none (ambiguous)", errAttribution, len(list), sess)
		}
	}
}
