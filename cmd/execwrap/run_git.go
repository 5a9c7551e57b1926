package main

import (
	"context"
	"fmt"

	"github.com/netproxy/netproxy/execcore"
	"github.com/netproxy/netproxy/sandbox"
)

// gitGuard applies SPEC §6.5 to a command that names git: it inspects the
// repositories the command's git can reach and returns the command's
// environment with every driver their own configuration defines
// neutralised (sandboxed or not). A rule's bypass of the sandbox is refused
// — the command runs sandboxed — when a repository's configuration names a
// program or could not be inspected: failing closed, since an override
// only covers what the inspection saw.
func (r *runner) gitGuard(ctx context.Context, sandboxed bool) (env []string, stillSandboxed bool, notes []string) {
	env = r.inv.Env
	if !sandbox.MentionsGit(r.inv.HandlerArgv) {
		return env, sandboxed, nil
	}
	roots := append([]string{r.inv.BaseCwd}, r.opts.writableRoots...)
	g, err := sandbox.InspectGit(ctx, env, r.inv.Cwd, roots)
	if withCfg, cerr := sandbox.WithGitConfig(env, g.Overrides); cerr == nil {
		env = withCfg
	} else if err == nil {
		err = cerr
	}
	bypass := !sandboxed && r.inv.Kind.Confining() &&
		r.inv.Requirement.Kind == execcore.Skip && r.inv.Requirement.BypassSandbox
	if !bypass {
		return env, sandboxed, nil
	}
	switch {
	case err != nil:
		fmt.Fprintf(r.stderr, "execwrap run: note: the rule's sandbox bypass is refused, the repositories could not be inspected: %v\n", err)
		return env, true, []string{"git_bypass_refused:uninspected"}
	case len(g.Programs) > 0:
		fmt.Fprintf(r.stderr, "execwrap run: note: the rule's sandbox bypass is refused: repository configuration names a program (%s); running sandboxed\n", g.Programs[0])
		return env, true, []string{"git_bypass_refused:" + g.Programs[0]}
	}
	return env, sandboxed, nil
}
