package main

import (
	"reflect"
	"testing"

	"github.com/netproxy/netproxy/sandbox"
)

func TestWorkspaceRoots(t *testing.T) {
	for _, c := range []struct {
		kind      sandbox.Kind
		cwd, base string
		extra     []string
		wantKind  sandbox.Kind
		want      []string
	}{
		{sandbox.KindWorkspaceWrite, "/w", "/w", []string{"/x"}, sandbox.KindWorkspaceWrite, []string{"/x"}},
		{sandbox.KindWorkspaceWrite, "/w/", "/w", nil, sandbox.KindWorkspaceWrite, nil},
		{sandbox.KindWorkspaceWrite, "/w/sub", "/w", nil, sandbox.KindReadOnly, []string{"/w"}},
		{sandbox.KindWorkspaceWrite, "/usr/local/bin", "/w", []string{"/x"}, sandbox.KindReadOnly, []string{"/w", "/x"}},
		{sandbox.KindReadOnly, "/usr/local/bin", "/w", nil, sandbox.KindReadOnly, nil},
		{sandbox.KindDangerFullAccess, "/elsewhere", "/w", nil, sandbox.KindDangerFullAccess, nil},
	} {
		k, roots := workspaceRoots(c.kind, c.cwd, c.base, c.extra)
		if k != c.wantKind || !reflect.DeepEqual(roots, c.want) {
			t.Errorf("%s cwd %s base %s: (%s, %q), want (%s, %q)", c.kind, c.cwd, c.base, k, roots, c.wantKind, c.want)
		}
	}
}
