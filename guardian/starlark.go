package guardian

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// StarlarkOptions tunes the script backend.
type StarlarkOptions struct {
	Timeout time.Duration
	// MaxSteps bounds one review's computation (0 → 10 million steps), so a
	// runaway script ends even if the context is never cancelled.
	MaxSteps uint64
}

// Starlark reviews with a script defining review(request) that returns a dict
// {"decision": "allow"|"deny", "rationale": str, "risk": str}.
type Starlark struct {
	path   string
	review *starlark.Function
	opts   StarlarkOptions
}

// NewStarlark loads and checks the script once; its globals are frozen so
// reviews may run concurrently.
func NewStarlark(path string, opts StarlarkOptions) (*Starlark, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("guardian.script: %v", err)
	}
	if opts.MaxSteps == 0 {
		opts.MaxSteps = 10_000_000
	}
	thread := &starlark.Thread{Name: "guardian-load", Print: func(*starlark.Thread, string) {}}
	thread.SetMaxExecutionSteps(opts.MaxSteps)
	globals, err := starlark.ExecFileOptions(&syntax.FileOptions{}, thread, path, src, nil)
	if err != nil {
		return nil, fmt.Errorf("guardian.script: %s: %v", path, err)
	}
	fn, ok := globals["review"].(*starlark.Function)
	if !ok {
		return nil, fmt.Errorf("guardian.script: %s: must define a function review(request)", path)
	}
	if fn.NumParams() < 1 {
		return nil, fmt.Errorf("guardian.script: %s: review must take one parameter (the request)", path)
	}
	globals.Freeze()
	return &Starlark{path: path, review: fn, opts: opts}, nil
}

// Review calls review(request) in a fresh thread bounded by the timeout, the
// step limit and ctx.
func (s *Starlark) Review(ctx context.Context, req ReviewRequest) (Verdict, error) {
	ctx, cancel := withTimeout(ctx, s.opts.Timeout)
	defer cancel()
	thread := &starlark.Thread{Name: "guardian-review", Print: func(*starlark.Thread, string) {}}
	thread.SetMaxExecutionSteps(s.opts.MaxSteps)
	stop := context.AfterFunc(ctx, func() { thread.Cancel(ctx.Err().Error()) })
	defer stop()

	res, err := starlark.Call(thread, s.review, starlark.Tuple{requestValue(req)}, nil)
	if err != nil {
		if ctx.Err() != nil {
			return Verdict{}, fmt.Errorf("guardian script %s: %w", s.path, ctx.Err())
		}
		return Verdict{}, fmt.Errorf("guardian script %s: %v", s.path, err)
	}
	return verdictFromStarlark(res)
}

// requestValue renders the request, each field cut to its cap, as a frozen
// Starlark dict of immutable values: strings, an int, and tuples for the
// command and the names of truncated fields. A script that tries to change
// it fails (and the review denies).
func requestValue(req ReviewRequest) *starlark.Dict {
	b := Bound(req)
	req = b.ReviewRequest
	d := starlark.NewDict(16)
	set := func(k string, v starlark.Value) { _ = d.SetKey(starlark.String(k), v) }
	set("id", starlark.String(req.ID))
	set("kind", starlark.String(req.Kind))
	set("session_id", starlark.String(req.SessionID))
	set("environment_id", starlark.String(req.EnvironmentID))
	set("execution_id", starlark.String(req.ExecutionID))
	set("host", starlark.String(req.Host))
	set("protocol", starlark.String(req.Protocol))
	set("port", starlark.MakeInt(int(req.Port)))
	set("target", starlark.String(req.Target))
	set("method", starlark.String(req.Method))
	set("path", starlark.String(req.Path))
	cmd := make([]starlark.Value, len(req.Command))
	for i, a := range req.Command {
		cmd[i] = starlark.String(a)
	}
	set("command", starlark.Tuple(cmd))
	tr := make(starlark.Tuple, len(b.Truncated))
	for i, f := range b.Truncated {
		tr[i] = starlark.String(f)
	}
	set("truncated", tr)
	set("cwd", starlark.String(req.Cwd))
	set("sandbox_permissions", starlark.String(req.SandboxPermissions))
	set("reason", starlark.String(req.Reason))
	set("justification", starlark.String(req.Justification))
	d.Freeze()
	return d
}

// verdictFromStarlark reads the dict review() returned, with the same rules
// as ParseVerdict: only the keys decision, rationale and risk.
func verdictFromStarlark(v starlark.Value) (Verdict, error) {
	m, ok := v.(starlark.IterableMapping)
	if !ok {
		return Verdict{}, fmt.Errorf("%w: review() returned %s, want a dict", ErrNoVerdict, v.Type())
	}
	for _, k := range m.Items() {
		ks, ok := starlark.AsString(k[0])
		if !ok || !verdictFields[ks] {
			return Verdict{}, fmt.Errorf("%w: review() returned unknown key %s (only decision, rationale, risk)", ErrNoVerdict, clipRunes(k[0].String(), 40))
		}
	}
	get := func(key string) (string, bool, error) {
		x, found, err := m.Get(starlark.String(key))
		if err != nil {
			return "", false, err
		}
		if !found || x == starlark.None {
			return "", false, nil
		}
		s, ok := starlark.AsString(x)
		if !ok {
			return "", true, fmt.Errorf("%w: review()[%q] is %s, want a string", ErrNoVerdict, key, x.Type())
		}
		return s, true, nil
	}
	return verdictFromFields(get, `review() returned no "decision"`)
}
