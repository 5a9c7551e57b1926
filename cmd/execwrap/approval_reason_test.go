package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netproxy/netproxy/execcore"
)

// An exec approval always tells the reviewer why: the prompt rule's
// sentence, else what the heuristics found, else why the policy asks.
func TestApprovalReason(t *testing.T) {
	rules := t.TempDir()
	if err := os.WriteFile(filepath.Join(rules, "p.rules"), []byte(`prefix_rule(pattern=["git", "push"], decision="prompt", justification="pushes leave the machine")`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NETPROXY_HOME", t.TempDir())
	for _, tc := range []struct {
		name string
		args []string
		kind execcore.RequirementKind
		want string
	}{
		{"heuristics", []string{"--", "rm", "-rf", "/tmp/x"}, execcore.NeedsApproval, "rm -rf /tmp/x: no rule matched; dangerous: forced_rm"},
		{"prompt rule", []string{"--rules", rules, "--", "git", "push", "origin"}, execcore.NeedsApproval, "`git push origin` requires approval: pushes leave the machine"},
		{"escalation", []string{"--sandbox-permissions", "require_escalated", "--", "ls"}, execcore.NeedsApproval, "ls: no rule matched; known safe read-only command · asks to run outside the sandbox (sandbox_permissions require_escalated)"},
		{"untrusted", []string{"--approval-policy", "untrusted", "--", "make", "all"}, execcore.NeedsApproval, "make all: no rule matched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv, _, err := parseRunFlags(append([]string{"--cwd", t.TempDir()}, tc.args...), strings.NewReader(""))
			if err != nil {
				t.Fatal(err)
			}
			if inv.Requirement.Kind != tc.kind {
				t.Fatalf("requirement %+v, want %s", inv.Requirement, tc.kind)
			}
			if inv.ApprovalReason != tc.want {
				t.Fatalf("reason %q, want %q", inv.ApprovalReason, tc.want)
			}
		})
	}
}
