package approvalsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/netproxy/netproxy/approvalsvc/settings"
	"github.com/netproxy/netproxy/guardian"
)

// DefaultHookTimeout bounds a hook whose config gives no timeout.
const DefaultHookTimeout = 5 * time.Second

// maxHookOutput bounds what is read from a hook's stdout.
const maxHookOutput = 64 << 10

// Hook is one external command consulted before any reviewer.
type Hook = settings.Hook

// HookAnswer is a hook's reply: {"decision":"allow"|"deny"|"none","message":…}.
type HookAnswer struct {
	Decision string `json:"decision"`
	Message  string `json:"message,omitempty"`
}

// hookRequest is the JSON written to a hook's stdin: the review request plus
// a type tag so one hook can serve network and exec approvals.
type hookRequest struct {
	Type string `json:"type"` // "network_approval" | "exec_approval"
	guardian.ReviewRequest
}

// ParseHookAnswer reads a hook's stdout strictly: one JSON object whose
// decision is allow, deny or none. Anything else is an error (no answer).
func ParseHookAnswer(b []byte) (HookAnswer, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return HookAnswer{}, errors.New("empty output")
	}
	if len(b) > maxHookOutput {
		return HookAnswer{}, fmt.Errorf("output exceeds %d bytes", maxHookOutput)
	}
	var raw struct {
		Decision *string `json:"decision"`
		Message  any     `json:"message"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil {
		return HookAnswer{}, fmt.Errorf("not a JSON object: %v", err)
	}
	if dec.More() {
		return HookAnswer{}, errors.New("trailing data after the JSON object")
	}
	if raw.Decision == nil {
		return HookAnswer{}, errors.New(`missing "decision"`)
	}
	a := HookAnswer{Decision: strings.ToLower(strings.TrimSpace(*raw.Decision))}
	switch a.Decision {
	case "allow", "deny", "none":
	default:
		return HookAnswer{}, fmt.Errorf("decision %q is not allow, deny or none", clip(*raw.Decision, 40))
	}
	switch m := raw.Message.(type) {
	case nil:
	case string:
		a.Message = clip(m, 2000)
	default:
		return HookAnswer{}, errors.New(`"message" must be a string`)
	}
	return a, nil
}

// limitedBuffer keeps the first max bytes written and drops the rest, so a
// hook flooding stdout cannot exhaust memory.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
	cut bool
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	room := l.max - l.buf.Len()
	if room <= 0 {
		l.cut = true
		return len(p), nil
	}
	if len(p) > room {
		l.buf.Write(p[:room])
		l.cut = true
		return len(p), nil
	}
	return l.buf.Write(p)
}

// runHooks runs the hooks in order; the first allow or deny is final.
// A hook that fails, times out or prints garbage counts as no answer and is
// logged. It returns ("", "") when no hook decided.
func runHooks(ctx context.Context, log *slog.Logger, hooks []Hook, env []string, req hookRequest) (decision, message string) {
	if len(hooks) == 0 {
		return "", ""
	}
	input, err := json.Marshal(req)
	if err != nil {
		return "", ""
	}
	for i, h := range hooks {
		if ctx.Err() != nil {
			return "", ""
		}
		a, err := runHook(ctx, h, env, input)
		if err != nil {
			log.Warn("approval hook gave no answer", "hook", i, "command", h.Command[0], "approval_id", req.ID, "error", err)
			continue
		}
		if a.Decision == "allow" || a.Decision == "deny" {
			return a.Decision, a.Message
		}
	}
	return "", ""
}

// runHook runs one hook in its own process group, bounded by its timeout:
// on expiry the whole group is killed, so a hook and its children can never
// hold a request longer than the timeout.
func runHook(ctx context.Context, h Hook, env []string, input []byte) (HookAnswer, error) {
	if len(h.Command) == 0 || h.Command[0] == "" {
		return HookAnswer{}, errors.New("empty command")
	}
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = DefaultHookTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.Command[0], h.Command[1:]...)
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(input)
	out := &limitedBuffer{max: maxHookOutput + 1}
	cmd.Stdout = out
	cmd.Stderr = nil // discarded: hooks must answer on stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		// Negative pid: the whole process group the hook leads.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	// If a grandchild escaped the group and holds stdout, stop waiting for it.
	cmd.WaitDelay = 200 * time.Millisecond
	err := cmd.Run()
	if ctx.Err() != nil {
		return HookAnswer{}, fmt.Errorf("timed out after %v", timeout)
	}
	if err != nil {
		return HookAnswer{}, fmt.Errorf("failed: %v", err)
	}
	out.mu.Lock()
	b, cut := out.buf.Bytes(), out.cut
	out.mu.Unlock()
	if cut {
		return HookAnswer{}, fmt.Errorf("output exceeds %d bytes", maxHookOutput)
	}
	return ParseHookAnswer(b)
}

// clip bounds s to n bytes on a rune boundary, for logs and stored text.
func clip(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	cut := n
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "\uFFFD") + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
