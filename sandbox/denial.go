package sandbox

import (
	"strings"
)

// denialKeywords are the reference's (codex is_likely_sandbox_denied)
// case-insensitive markers of a sandbox denial in a command's output.
var denialKeywords = []string{
	"operation not permitted",
	"permission denied",
	"read-only file system",
	"seccomp",
	"sandbox",
	"landlock",
	"failed to write file",
}

// networkPolicyMarker is text netproxy-aware tools may print about a
// decision; it is never itself a sandbox denial (codex
// sandbox_detection_ignores_network_policy_text).
const networkPolicyMarker = "network_policy_decision"

// Denial says whether a finished attempt looks like the sandbox stopped it
// and why.
type Denial struct {
	Denied bool
	// Evidence names what matched: "keyword:read-only file system",
	// "exit:159", "network:<host>"; never output beyond the keyword.
	Evidence []string
}

// ClassifyDenial applies the reference heuristics (codex-execpolicy.md §7
// step 4) to one sandboxed attempt: never for an unsandboxed run, exit 0 or
// a timeout; keywords first; then exit 2/126/127 are ordinary failures; exit
// 159 (128+SIGSYS) is a seccomp kill.
func ClassifyDenial(sandboxed bool, exitCode int, timedOut bool, stdout, stderr []byte) Denial {
	if !sandboxed || exitCode == 0 || timedOut {
		return Denial{}
	}
	var ev []string
	for _, out := range [][]byte{stdout, stderr} {
		low := strings.ToLower(string(out))
		low = stripPolicyLines(low)
		for _, k := range denialKeywords {
			if strings.Contains(low, k) && !contains(ev, "keyword:"+k) {
				ev = append(ev, "keyword:"+k)
			}
		}
	}
	if len(ev) > 0 {
		return Denial{Denied: true, Evidence: ev}
	}
	switch exitCode {
	case 2, 126, 127:
		return Denial{}
	case 128 + 31: // SIGSYS
		return Denial{Denied: true, Evidence: []string{"exit:159"}}
	}
	return Denial{}
}

// stripPolicyLines drops lines that carry netproxy's own decision text, so
// a tool echoing a policy message is not mistaken for a sandbox denial.
func stripPolicyLines(low string) string {
	if !strings.Contains(low, networkPolicyMarker) {
		return low
	}
	var b strings.Builder
	for line := range strings.SplitSeq(low, "\n") {
		if !strings.Contains(line, networkPolicyMarker) {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
