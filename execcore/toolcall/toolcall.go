// Package toolcall decodes a model's FunctionCall arguments for the
// `shell_command` and `exec_command` tools, strictly: unknown fields, wrong
// types, duplicate keys and bad values are errors that name the field; the
// reference's defaults are applied. It also derives the handler argv.
//
// It decodes untrusted bytes only; it must never run anything or read the
// environment beyond what the caller passes in.
package toolcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/netproxy/netproxy/execcore/heuristics"
	"github.com/netproxy/netproxy/execcore/shellparse"
)

// Tool names.
const (
	ShellCommand = "shell_command"
	ExecCommand  = "exec_command"
)

// Defaults from the reference (§8).
const (
	DefaultTimeoutMS       = 10000
	DefaultYieldTimeMS     = 10000
	MinYieldTimeMS         = 250
	MaxYieldTimeMS         = 30000
	DefaultMaxOutputTokens = 10000
	// maxArgsBytes bounds the arguments string.
	maxArgsBytes = 1 << 20
)

// AdditionalPermissions widens the sandbox for one command.
type AdditionalPermissions struct {
	Network    *NetworkPermission    `json:"network,omitempty"`
	FileSystem *FileSystemPermission `json:"file_system,omitempty"`
}

// NetworkPermission asks for network access.
type NetworkPermission struct {
	Enabled bool `json:"enabled"`
}

// FileSystemPermission lists absolute paths to read or write.
type FileSystemPermission struct {
	Read  []string `json:"read,omitempty"`
	Write []string `json:"write,omitempty"`
}

// Call is a decoded tool call with every default applied.
type Call struct {
	Tool   string
	Script string
	// Workdir as given ("" when absent).
	Workdir string
	// Shell from exec_command's `shell` field ("" when absent).
	Shell string
	// Login is the effective login flag.
	Login bool
	// TimeoutMS (shell_command).
	TimeoutMS uint64
	// TTY, YieldTimeMS and MaxOutputTokens (exec_command).
	TTY                bool
	YieldTimeMS        uint64
	MaxOutputTokens    uint64
	SandboxPermissions heuristics.SandboxPermissions
	// SandboxPermissionsSet reports that the field was present.
	SandboxPermissionsSet bool
	AdditionalPermissions *AdditionalPermissions
	Justification         string
	PrefixRule            []string
	EnvironmentID         string
}

// Options are the decoder's configuration.
type Options struct {
	// AllowLoginShell is the config switch; an absent `login` takes its
	// value and `login: true` is an error when it is false.
	AllowLoginShell bool
}

// DefaultOptions allows login shells (the reference default).
func DefaultOptions() Options { return Options{AllowLoginShell: true} }

// fieldSpec describes one accepted field: its JSON kind.
type fieldKind int

const (
	kString fieldKind = iota
	kBool
	kUint
	kStringList
	kObject
)

var shellCommandFields = map[string]fieldKind{
	"command": kString, "workdir": kString, "login": kBool, "timeout_ms": kUint, "timeout": kUint,
	"sandbox_permissions": kString, "additional_permissions": kObject, "justification": kString,
	"prefix_rule": kStringList,
}

var execCommandFields = map[string]fieldKind{
	"cmd": kString, "workdir": kString, "shell": kString, "login": kBool, "tty": kBool,
	"yield_time_ms": kUint, "max_output_tokens": kUint, "sandbox_permissions": kString,
	"additional_permissions": kObject, "justification": kString, "prefix_rule": kStringList,
	"environment_id": kString,
}

// Decode parses the arguments of tool. args is the FunctionCall.arguments
// value: a JSON object, or a JSON string holding one (the wire form).
func Decode(tool string, args []byte, opts Options) (Call, error) {
	var fields map[string]fieldKind
	switch tool {
	case ShellCommand:
		fields = shellCommandFields
	case ExecCommand:
		fields = execCommandFields
	default:
		return Call{}, fmt.Errorf("unknown tool %q (want shell_command or exec_command)", tool)
	}
	if len(args) > maxArgsBytes {
		return Call{}, fmt.Errorf("%s arguments: larger than %d bytes", tool, maxArgsBytes)
	}
	if !utf8.Valid(args) {
		return Call{}, fmt.Errorf("%s arguments: invalid UTF-8", tool)
	}
	obj, err := decodeObject(args)
	if err != nil {
		return Call{}, fmt.Errorf("%s arguments: %w", tool, err)
	}
	c := Call{Tool: tool, SandboxPermissions: heuristics.UseDefault}
	var loginSet bool
	for _, kv := range obj {
		kind, ok := fields[kv.key]
		if !ok {
			return Call{}, fmt.Errorf("%s arguments: unknown field %q (accepted: %s)", tool, kv.key, fieldNames(fields))
		}
		if err := checkKind(kv.key, kind, kv.raw); err != nil {
			return Call{}, fmt.Errorf("%s arguments: %w", tool, err)
		}
		if isNull(kv.raw) {
			continue // an explicit null means "absent", as serde's Option does
		}
		switch kv.key {
		case "command", "cmd":
			c.Script = mustString(kv.raw)
		case "workdir":
			c.Workdir = mustString(kv.raw)
		case "shell":
			c.Shell = mustString(kv.raw)
			if c.Shell == "" {
				return Call{}, fmt.Errorf("%s arguments: field \"shell\" must not be empty", tool)
			}
		case "login":
			c.Login, loginSet = mustBool(kv.raw), true
		case "timeout_ms", "timeout":
			c.TimeoutMS = mustUint(kv.raw)
		case "tty":
			c.TTY = mustBool(kv.raw)
		case "yield_time_ms":
			c.YieldTimeMS = mustUint(kv.raw)
		case "max_output_tokens":
			c.MaxOutputTokens = mustUint(kv.raw)
		case "sandbox_permissions":
			sp, err := heuristics.ParseSandboxPermissions(mustString(kv.raw))
			if err != nil {
				return Call{}, fmt.Errorf("%s arguments: field \"sandbox_permissions\": %w", tool, err)
			}
			c.SandboxPermissions, c.SandboxPermissionsSet = sp, true
		case "additional_permissions":
			ap, err := decodeAdditional(kv.raw)
			if err != nil {
				return Call{}, fmt.Errorf("%s arguments: field \"additional_permissions\": %w", tool, err)
			}
			c.AdditionalPermissions = ap
		case "justification":
			c.Justification = mustString(kv.raw)
		case "prefix_rule":
			var pr []string
			_ = json.Unmarshal(kv.raw, &pr) // kind already checked
			c.PrefixRule = pr
		case "environment_id":
			c.EnvironmentID = mustString(kv.raw)
		}
	}
	// `timeout` is serde's alias of `timeout_ms`: giving both is the same
	// field twice.
	if _, ok := obj.get("timeout"); ok {
		if _, ok := obj.get("timeout_ms"); ok {
			return Call{}, fmt.Errorf("%s arguments: duplicate field \"timeout_ms\" (also given as its alias \"timeout\")", tool)
		}
	}
	scriptField := "command"
	if tool == ExecCommand {
		scriptField = "cmd"
	}
	if _, ok := obj.get(scriptField); !ok || isNullRaw(obj, scriptField) {
		return Call{}, fmt.Errorf("%s arguments: missing required field %q", tool, scriptField)
	}
	if strings.IndexByte(c.Script, 0) >= 0 {
		return Call{}, fmt.Errorf("%s arguments: field %q contains a NUL byte", tool, scriptField)
	}
	if strings.IndexByte(c.Workdir, 0) >= 0 || strings.IndexByte(c.Shell, 0) >= 0 {
		return Call{}, fmt.Errorf("%s arguments: a path field contains a NUL byte", tool)
	}
	if loginSet && c.Login && !opts.AllowLoginShell {
		return Call{}, fmt.Errorf("%s arguments: login shell is disabled by config; omit `login` or set it to false.", tool)
	}
	if !loginSet {
		c.Login = opts.AllowLoginShell
	}
	if c.AdditionalPermissions != nil && c.SandboxPermissions != heuristics.WithAdditionalPermissions {
		return Call{}, fmt.Errorf("%s arguments: `additional_permissions` requires `sandbox_permissions` set to `with_additional_permissions`", tool)
	}
	switch tool {
	case ShellCommand:
		if c.TimeoutMS == 0 {
			c.TimeoutMS = DefaultTimeoutMS
		}
	case ExecCommand:
		if _, ok := obj.get("yield_time_ms"); !ok || isNullRaw(obj, "yield_time_ms") {
			c.YieldTimeMS = DefaultYieldTimeMS
		}
		c.YieldTimeMS = min(max(c.YieldTimeMS, MinYieldTimeMS), MaxYieldTimeMS)
		if _, ok := obj.get("max_output_tokens"); !ok || isNullRaw(obj, "max_output_tokens") {
			c.MaxOutputTokens = DefaultMaxOutputTokens
		}
	}
	return c, nil
}

func fieldNames(fields map[string]fieldKind) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

type rawField struct {
	key string
	raw json.RawMessage
}

type rawObject []rawField

func (o rawObject) get(k string) (json.RawMessage, bool) {
	for _, f := range o {
		if f.key == k {
			return f.raw, true
		}
	}
	return nil, false
}

func isNullRaw(o rawObject, k string) bool {
	raw, _ := o.get(k)
	return isNull(raw)
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// decodeObject reads one JSON object (or a JSON string holding one), keeps
// field order, and rejects duplicate keys and trailing data.
func decodeObject(data []byte) (rawObject, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("empty arguments; want a JSON object")
	}
	if trimmed[0] == '"' {
		var inner string
		if err := strictUnmarshal(trimmed, &inner); err != nil {
			return nil, fmt.Errorf("invalid JSON string: %v", err)
		}
		trimmed = bytes.TrimSpace([]byte(inner))
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errors.New("invalid JSON: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("invalid JSON: want a JSON object")
	}
	var obj rawObject
	seen := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("invalid JSON: %v", err)
		}
		key, ok := kt.(string)
		if !ok {
			return nil, errors.New("invalid JSON: object key is not a string")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("invalid JSON in field %q: %v", key, err)
		}
		if seen[key] {
			return nil, fmt.Errorf("duplicate field %q", key)
		}
		seen[key] = true
		obj = append(obj, rawField{key: key, raw: raw})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("invalid JSON: trailing data after the object")
	}
	// dec.Token() at EOF returns io.EOF; any other error is a syntax error.
	if rest := bytes.TrimSpace(trimmed[dec.InputOffset():]); len(rest) > 0 {
		return nil, errors.New("invalid JSON: trailing data after the object")
	}
	return obj, nil
}

func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if rest := bytes.TrimSpace(data[dec.InputOffset():]); len(rest) > 0 {
		return errors.New("trailing data")
	}
	return nil
}

func checkKind(key string, kind fieldKind, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	want := map[fieldKind]string{kString: "a string", kBool: "a boolean", kUint: "a non-negative integer", kStringList: "an array of strings", kObject: "an object"}[kind]
	bad := func() error {
		return fmt.Errorf("field %q must be %s, got %s", key, want, describe(raw))
	}
	t := bytes.TrimSpace(raw)
	switch kind {
	case kString:
		var s string
		if len(t) == 0 || t[0] != '"' || json.Unmarshal(t, &s) != nil {
			return bad()
		}
	case kBool:
		if string(t) != "true" && string(t) != "false" {
			return bad()
		}
	case kUint:
		var n uint64
		if len(t) == 0 || t[0] < '0' || t[0] > '9' || bytes.ContainsAny(t, ".eE") || json.Unmarshal(t, &n) != nil {
			return bad()
		}
	case kStringList:
		var l []string
		if len(t) == 0 || t[0] != '[' || json.Unmarshal(t, &l) != nil {
			return bad()
		}
		for _, s := range l {
			if strings.IndexByte(s, 0) >= 0 {
				return fmt.Errorf("field %q contains a NUL byte", key)
			}
		}
	case kObject:
		if len(t) == 0 || t[0] != '{' {
			return bad()
		}
	}
	return nil
}

func describe(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return "nothing"
	}
	switch t[0] {
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case '[':
		return "an array"
	case '{':
		return "an object"
	case 'n':
		return "null"
	}
	return "the number " + string(t)
}

func mustString(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

func mustBool(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "true" }

func mustUint(raw json.RawMessage) uint64 {
	var n uint64
	_ = json.Unmarshal(raw, &n)
	return n
}

func decodeAdditional(raw json.RawMessage) (*AdditionalPermissions, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var ap AdditionalPermissions
	if err := dec.Decode(&ap); err != nil {
		return nil, err
	}
	if ap.FileSystem != nil {
		for _, list := range [][]string{ap.FileSystem.Read, ap.FileSystem.Write} {
			for _, p := range list {
				if !filepath.IsAbs(p) {
					return nil, fmt.Errorf("file_system paths must be absolute (got %q)", p)
				}
			}
		}
	}
	return &ap, nil
}

// HandlerArgv derives the argv the handler would run: the call's `shell`
// (exec_command) or defaultShell, with -lc/-c per the login flag.
func (c Call) HandlerArgv(defaultShell string) (argv []string, shell string, t shellparse.ShellType) {
	shell = defaultShell
	if c.Shell != "" {
		shell = c.Shell
	}
	t = shellparse.DetectShellType(shell)
	return shellparse.DeriveExecArgs(shell, t, c.Script, c.Login), shell, t
}

// ResolveWorkdir resolves the call's workdir against base: absolute paths
// are kept, relative ones joined; an empty workdir means base.
func (c Call) ResolveWorkdir(base string) string {
	if c.Workdir == "" {
		return filepath.Clean(base)
	}
	if filepath.IsAbs(c.Workdir) {
		return filepath.Clean(c.Workdir)
	}
	return filepath.Join(base, c.Workdir)
}
