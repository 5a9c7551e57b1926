package toolcall

import (
	"reflect"
	"strings"
	"testing"

	"github.com/netproxy/netproxy/execcore/heuristics"
)

func TestDecodeDefaults(t *testing.T) {
	c, err := Decode(ShellCommand, []byte(`{"command":"ls"}`), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if c.Script != "ls" || !c.Login || c.TimeoutMS != DefaultTimeoutMS || c.SandboxPermissions != heuristics.UseDefault || c.SandboxPermissionsSet {
		t.Fatalf("%+v", c)
	}
	c, err = Decode(ExecCommand, []byte(`{"cmd":"ls"}`), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if c.TTY || c.YieldTimeMS != 10000 || c.MaxOutputTokens != 10000 || !c.Login {
		t.Fatalf("%+v", c)
	}
	c, _ = Decode(ShellCommand, []byte(`{"command":"ls"}`), Options{AllowLoginShell: false})
	if c.Login {
		t.Fatal("login follows the config switch when absent")
	}
}

func TestDecodeAllFields(t *testing.T) {
	c, err := Decode(ShellCommand, []byte(`{"command":"echo hi","workdir":"sub","login":false,"timeout":5,"sandbox_permissions":"with_additional_permissions",
		"additional_permissions":{"network":{"enabled":true},"file_system":{"read":["/a"],"write":["/b"]}},"justification":"j","prefix_rule":["echo","hi"]}`), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if c.Workdir != "sub" || c.Login || c.TimeoutMS != 5 || c.SandboxPermissions != heuristics.WithAdditionalPermissions ||
		!c.AdditionalPermissions.Network.Enabled || c.AdditionalPermissions.FileSystem.Write[0] != "/b" || c.Justification != "j" ||
		!reflect.DeepEqual(c.PrefixRule, []string{"echo", "hi"}) {
		t.Fatalf("%+v", c)
	}
	c, err = Decode(ExecCommand, []byte(`{"cmd":"x","workdir":"","shell":"/bin/zsh","login":true,"tty":true,"yield_time_ms":1,"max_output_tokens":7,"environment_id":"e"}`), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if c.Shell != "/bin/zsh" || !c.TTY || c.YieldTimeMS != MinYieldTimeMS || c.MaxOutputTokens != 7 || c.EnvironmentID != "e" {
		t.Fatalf("%+v", c)
	}
	c, _ = Decode(ExecCommand, []byte(`{"cmd":"x","yield_time_ms":999999}`), DefaultOptions())
	if c.YieldTimeMS != MaxYieldTimeMS {
		t.Fatalf("clamp: %d", c.YieldTimeMS)
	}
	// The wire form: a JSON string holding the object.
	c, err = Decode(ExecCommand, []byte(`"{\"cmd\":\"rg -n 'TODO' src\",\"workdir\":\"/workspace/project\",\"tty\":false}"`), DefaultOptions())
	if err != nil || c.Script != "rg -n 'TODO' src" || c.Workdir != "/workspace/project" {
		t.Fatalf("%+v %v", c, err)
	}
	// null means absent.
	c, err = Decode(ShellCommand, []byte(`{"command":"ls","workdir":null,"login":null,"prefix_rule":null}`), DefaultOptions())
	if err != nil || !c.Login || c.Workdir != "" {
		t.Fatalf("%+v %v", c, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct{ tool, args, want string }{
		{ShellCommand, `{"command": "ls"`, "invalid JSON"},
		{ShellCommand, ``, "empty arguments"},
		{ShellCommand, `[]`, "want a JSON object"},
		{ShellCommand, `"[]"`, "want a JSON object"},
		{ShellCommand, `{"command":"ls"} {}`, "trailing data"},
		{ShellCommand, `{"command":"ls"}x`, "invalid JSON"},
		{ShellCommand, `{"command":"ls","bogus_field":1}`, `unknown field "bogus_field"`},
		{ShellCommand, `{"command":"ls","cmd":"ls"}`, `unknown field "cmd"`},
		{ExecCommand, `{"cmd":"ls","command":"ls"}`, `unknown field "command"`},
		{ShellCommand, `{"command":5}`, `field "command" must be a string, got the number 5`},
		{ShellCommand, `{"command":["ls"]}`, `field "command" must be a string, got an array`},
		{ShellCommand, `{"command":"ls","login":"yes"}`, `field "login" must be a boolean`},
		{ShellCommand, `{"command":"ls","timeout_ms":-1}`, `field "timeout_ms" must be a non-negative integer`},
		{ShellCommand, `{"command":"ls","timeout_ms":1.5}`, `field "timeout_ms" must be a non-negative integer`},
		{ShellCommand, `{"command":"ls","timeout_ms":1e3}`, `field "timeout_ms" must be a non-negative integer`},
		{ShellCommand, `{"command":"ls","timeout_ms":99999999999999999999999}`, `field "timeout_ms" must be a non-negative integer`},
		{ShellCommand, `{"command":"ls","prefix_rule":"ls"}`, `field "prefix_rule" must be an array of strings`},
		{ShellCommand, `{"command":"ls","prefix_rule":[1]}`, `field "prefix_rule" must be an array of strings`},
		{ShellCommand, `{"command":"ls","sandbox_permissions":"root"}`, `invalid sandbox_permissions "root"`},
		{ShellCommand, `{"command":"ls","additional_permissions":{"network":{"enabled":true}}}`, "requires `sandbox_permissions` set to `with_additional_permissions`"},
		{ShellCommand, `{"command":"ls","sandbox_permissions":"with_additional_permissions","additional_permissions":{"fs":{}}}`, `unknown field "fs"`},
		{ShellCommand, `{"command":"ls","sandbox_permissions":"with_additional_permissions","additional_permissions":{"file_system":{"read":["rel"]}}}`, "must be absolute"},
		{ShellCommand, `{"workdir":"x"}`, `missing required field "command"`},
		{ExecCommand, `{"workdir":"x"}`, `missing required field "cmd"`},
		{ExecCommand, `{"cmd":null}`, `missing required field "cmd"`},
		{ShellCommand, `{"command":"ls","command":"rm -rf /"}`, `duplicate field "command"`},
		{ShellCommand, `{"command":"ls","timeout":5,"timeout_ms":6}`, `duplicate field "timeout_ms"`},
		{ExecCommand, `{"cmd":"ls","shell":""}`, `"shell" must not be empty`},
		{ShellCommand, `{"command":"a\u0000b"}`, "NUL byte"},
		{ShellCommand, "{\"command\":\"\xff\"}", "invalid UTF-8"},
		{"apply_patch", `{}`, "unknown tool"},
	}
	for _, c := range cases {
		_, err := Decode(c.tool, []byte(c.args), DefaultOptions())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: err = %v, want %q", c.tool, c.args, err, c.want)
		}
	}
	if _, err := Decode(ShellCommand, []byte(`{"command":"ls","login":true}`), Options{AllowLoginShell: false}); err == nil ||
		!strings.Contains(err.Error(), "login shell is disabled by config") {
		t.Fatalf("err = %v", err)
	}
}

func TestHandlerArgvAndWorkdir(t *testing.T) {
	c, _ := Decode(ExecCommand, []byte(`{"cmd":"echo hello"}`), DefaultOptions())
	argv, shell, st := c.HandlerArgv("/bin/zsh")
	if !reflect.DeepEqual(argv, []string{"/bin/zsh", "-lc", "echo hello"}) || shell != "/bin/zsh" || st != "zsh" {
		t.Fatalf("%q %s %s", argv, shell, st)
	}
	for wd, want := range map[string]string{"": "/w", "sub": "/w/sub", "/abs": "/abs", "../x": "/x", "a/../b": "/w/b"} {
		c.Workdir = wd
		if got := c.ResolveWorkdir("/w"); got != want {
			t.Errorf("%q: %s, want %s", wd, got, want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"command":"ls"}`, `{"cmd":"ls","tty":true,"yield_time_ms":3}`, `"{\"cmd\":\"x\"}"`, `{"command":1}`, `{`, `null`,
		`{"command":"x","additional_permissions":{"network":{"enabled":true}},"sandbox_permissions":"with_additional_permissions"}`} {
		f.Add(ShellCommand, []byte(s))
		f.Add(ExecCommand, []byte(s))
	}
	f.Fuzz(func(t *testing.T, tool string, data []byte) {
		c, err := Decode(tool, data, DefaultOptions())
		if err != nil {
			return
		}
		if c.Tool != ShellCommand && c.Tool != ExecCommand {
			t.Fatalf("accepted tool %q", c.Tool)
		}
		if c.Tool == ExecCommand && (c.YieldTimeMS < MinYieldTimeMS || c.YieldTimeMS > MaxYieldTimeMS) {
			t.Fatalf("yield %d out of range", c.YieldTimeMS)
		}
		if strings.IndexByte(c.Script, 0) >= 0 {
			t.Fatal("NUL in script")
		}
		argv, _, _ := c.HandlerArgv("/bin/bash")
		if len(argv) < 3 || argv[len(argv)-1] != c.Script {
			t.Fatalf("handler argv %q", argv)
		}
	})
}
