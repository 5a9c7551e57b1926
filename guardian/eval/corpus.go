// Package eval owns the Guardian evaluation harness behind
// `netproxy guardian eval`: it loads a labelled corpus of review requests
// (JSON Lines files), runs each through a Reviewer, and summarises the
// outcome (confusion table, false-allow rate, pre-screen catches, latency,
// tokens).
//
// It never changes a verdict and never retries: a backend error counts as a
// denial, as it does in the proxy. A corpus file that does not parse is an
// error naming its path and line.
package eval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/netproxy/netproxy/guardian"
)

// Case is one labelled review request: one line of a corpus file.
type Case struct {
	Name     string `json:"name"`
	Expect   string `json:"expect"`   // allow | deny
	Category string `json:"category"` // free label, e.g. benign_registry, exfil_paste
	// Vector names the agent-controlled field that carries injected
	// reviewer-directed text; empty for cases without injection.
	Vector  string                 `json:"vector,omitempty"`
	Note    string                 `json:"note,omitempty"`
	Request guardian.ReviewRequest `json:"request"`

	// Where the case was read from.
	File string `json:"-"`
	Line int    `json:"-"`
}

// Expected labels.
const (
	ExpectAllow = "allow"
	ExpectDeny  = "deny"
)

// vectors are the field names a Vector may take.
var vectors = map[string]bool{"justification": true, "reason": true, "cwd": true, "command": true, "host": true,
	"target": true, "session_id": true, "environment_id": true, "execution_id": true, "sandbox_permissions": true}

// maxLine bounds one corpus line.
const maxLine = 1 << 20

// LoadDir reads every *.jsonl file of dir (sorted by name). Names must be
// unique across the corpus.
func LoadDir(dir string) ([]Case, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no *.jsonl corpus files", dir)
	}
	sort.Strings(files)
	var all []Case
	seen := map[string]string{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		cases, err := Parse(f, fh)
		fh.Close()
		if err != nil {
			return nil, err
		}
		for _, c := range cases {
			if prev, dup := seen[c.Name]; dup {
				return nil, fmt.Errorf("%s:%d: name %q already used at %s", c.File, c.Line, c.Name, prev)
			}
			seen[c.Name] = fmt.Sprintf("%s:%d", c.File, c.Line)
		}
		all = append(all, cases...)
	}
	return all, nil
}

// Parse reads one corpus file: one JSON object per line; blank lines and
// lines starting with '#' are skipped. Every error is "path:line: …".
func Parse(path string, r io.Reader) ([]Case, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var out []Case
	line := 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 || text[0] == '#' {
			continue
		}
		c, err := parseLine(text)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		c.File, c.Line = path, line
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %v", path, line+1, err)
	}
	return out, nil
}

// parseLine decodes and checks one case.
func parseLine(b []byte) (Case, error) {
	var c Case
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Case{}, fmt.Errorf("not a corpus case: %v", err)
	}
	if dec.More() {
		return Case{}, fmt.Errorf("more than one JSON value on the line")
	}
	switch {
	case strings.TrimSpace(c.Name) == "":
		return Case{}, fmt.Errorf("name: required")
	case c.Expect != ExpectAllow && c.Expect != ExpectDeny:
		return Case{}, fmt.Errorf("expect: %q is not \"allow\" or \"deny\"", c.Expect)
	case strings.TrimSpace(c.Category) == "":
		return Case{}, fmt.Errorf("category: required")
	case c.Vector != "" && !vectors[c.Vector]:
		return Case{}, fmt.Errorf("vector: %q is not an agent-controlled field", c.Vector)
	case c.Vector != "" && c.Expect != ExpectDeny:
		return Case{}, fmt.Errorf("vector: a case carrying injected text must expect deny")
	case c.Request.Kind != "network" && c.Request.Kind != "exec":
		return Case{}, fmt.Errorf("request.kind: %q is not \"network\" or \"exec\"", c.Request.Kind)
	case c.Request.Kind == "network" && c.Request.Host == "":
		return Case{}, fmt.Errorf("request.host: required for a network case")
	case c.Request.Kind == "exec" && len(c.Request.Command) == 0:
		return Case{}, fmt.Errorf("request.command: required for an exec case")
	}
	return c, nil
}
