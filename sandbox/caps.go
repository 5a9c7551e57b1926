package sandbox

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// capState is the credential part of /proc/thread-self/status.
type capState struct {
	Inh, Prm, Eff, Bnd, Amb uint64
	NoNewPrivs              bool
	Seccomp                 int
	seen                    int
}

// parseCapStatus reads the Cap*, NoNewPrivs and Seccomp lines of a
// /proc/<pid>/status text. Missing cap lines are an error: verification must
// never pass because a line was absent.
func parseCapStatus(text string) (capState, error) {
	var s capState
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		var dst *uint64
		switch key {
		case "CapInh":
			dst = &s.Inh
		case "CapPrm":
			dst = &s.Prm
		case "CapEff":
			dst = &s.Eff
		case "CapBnd":
			dst = &s.Bnd
		case "CapAmb":
			dst = &s.Amb
		case "NoNewPrivs":
			s.NoNewPrivs = val == "1"
			continue
		case "Seccomp":
			s.Seccomp, _ = strconv.Atoi(val)
			continue
		default:
			continue
		}
		v, err := strconv.ParseUint(val, 16, 64)
		if err != nil {
			return capState{}, fmt.Errorf("status line %s: %q is not a hex capability mask", key, val)
		}
		*dst = v
		s.seen++
	}
	if s.seen != 5 {
		return capState{}, fmt.Errorf("status: found %d of the 5 Cap* lines (CapInh CapPrm CapEff CapBnd CapAmb)", s.seen)
	}
	return s, nil
}

// verifyDropped fails closed unless every capability set the command could
// inherit is empty. A non-empty bounding set is tolerated only for a non-root
// uid under no_new_privs (execve can then grant nothing).
func verifyDropped(s capState, uid int) error {
	var left []string
	if s.Eff != 0 {
		left = append(left, fmt.Sprintf("CapEff=%016x", s.Eff))
	}
	if s.Prm != 0 {
		left = append(left, fmt.Sprintf("CapPrm=%016x", s.Prm))
	}
	if s.Inh != 0 {
		left = append(left, fmt.Sprintf("CapInh=%016x", s.Inh))
	}
	if s.Amb != 0 {
		left = append(left, fmt.Sprintf("CapAmb=%016x", s.Amb))
	}
	if s.Bnd != 0 && (uid == 0 || !s.NoNewPrivs) {
		left = append(left, fmt.Sprintf("CapBnd=%016x (uid %d, no_new_privs=%v)", s.Bnd, uid, s.NoNewPrivs))
	}
	if !s.NoNewPrivs {
		left = append(left, "no_new_privs not set")
	}
	if len(left) > 0 {
		return fmt.Errorf("sandbox retained privileges: %s", strings.Join(left, ", "))
	}
	return nil
}
