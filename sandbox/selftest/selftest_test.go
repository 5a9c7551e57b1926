package selftest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func allHeld() []Result {
	rs := make([]Result, len(Names))
	for i, n := range Names {
		rs[i] = Result{Name: n, Result: Held, Evidence: "EPERM"}
	}
	return rs
}

func TestNamesAreUniqueAndEachHasAProbe(t *testing.T) {
	seen := map[string]bool{}
	fns := probes()
	for _, n := range Names {
		if seen[n] {
			t.Errorf("%s listed twice", n)
		}
		seen[n] = true
		if fns[n] == nil {
			t.Errorf("%s has no probe function", n)
		}
	}
	if len(fns) != len(Names) {
		t.Errorf("%d probe functions for %d names", len(fns), len(Names))
	}
}

func TestExitCodeRules(t *testing.T) {
	set := func(name string, o Outcome) []Result {
		rs := allHeld()
		for i := range rs {
			if rs[i].Name == name {
				rs[i].Result = o
			}
		}
		return rs
	}
	cases := []struct {
		name string
		rs   []Result
		err  string
		want int
	}{
		{"all held", allHeld(), "", ExitAllHeld},
		{"a skip is not a failure", set("net.tcp6-host", Skipped), "", ExitAllHeld},
		{"one escape", set("net.tfo4", Escaped), "", ExitEscaped},
		{"one error", set("dns.proxy", Error), "", ExitError},
		{"escape beats error", append(set("dns.proxy", Error), Result{Name: "fs.setuid", Result: Escaped}), "", ExitEscaped},
		{"an unknown verdict is an error", set("sys.bpf", "maybe"), "", ExitError},
		{"a missing probe is an error", allHeld()[1:], "", ExitError},
		{"nothing ran", nil, "clone: EPERM", ExitSetup},
	}
	for _, c := range cases {
		rep := NewReport("namespaces", "proxied", c.rs)
		rep.Error = c.err
		if got := rep.ExitCode(); got != c.want {
			t.Errorf("%s: exit %d, want %d (%+v)", c.name, got, c.want, rep)
		}
	}
}

func TestNewReportOrdersCountsAndFillsGaps(t *testing.T) {
	rs := allHeld()
	// Reversed input, one missing, one extra, one with host-only data.
	var in []Result
	for i := len(rs) - 1; i >= 1; i-- {
		in = append(in, rs[i])
	}
	in[0].Hashes = map[string]string{"/x": "abc"}
	in = append(in, Result{Name: "zz.extra", Result: Escaped, Evidence: "x"})
	rep := NewReport("landlock", "none", in)
	if len(rep.Probes) != len(Names)+1 {
		t.Fatalf("%d probes", len(rep.Probes))
	}
	for i, n := range Names {
		if rep.Probes[i].Name != n {
			t.Fatalf("probe %d is %s, want %s", i, rep.Probes[i].Name, n)
		}
		if rep.Probes[i].Hashes != nil {
			t.Fatalf("%s keeps its hashes in the report", n)
		}
	}
	if rep.Probes[0].Result != Error || !strings.Contains(rep.Probes[0].Evidence, "no result") {
		t.Fatalf("missing probe: %+v", rep.Probes[0])
	}
	if rep.Held != len(Names)-1 || rep.Errors != 1 || rep.Escaped != 1 || rep.Skipped != 0 {
		t.Fatalf("counts %+v", rep)
	}
}

func TestWriteTextOneLinePerProbe(t *testing.T) {
	rs := allHeld()
	rs[0] = Result{Name: Names[0], Result: Escaped, Evidence: "host saw:\na connection"}
	rs[1] = Result{Name: Names[1], Result: Skipped, Evidence: "no IPv6"}
	rep := NewReport("namespaces", "proxied", rs)
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != len(Names)+2 {
		t.Fatalf("%d lines, want header + %d probes + summary:\n%s", len(lines), len(Names), b.String())
	}
	for i, n := range Names {
		f := strings.Fields(lines[i+1])
		if len(f) < 3 || f[0] != n {
			t.Fatalf("line %d %q does not start with %s", i+1, lines[i+1], n)
		}
	}
	if f := strings.Fields(lines[1]); f[1] != "ESCAPED" || !strings.Contains(lines[1], "host saw: a connection") {
		t.Fatalf("escaped line %q", lines[1])
	}
	if f := strings.Fields(lines[2]); f[1] != "skipped" {
		t.Fatalf("skipped line %q", lines[2])
	}
	if want := fmt.Sprintf("%d held, 1 escaped, 0 error, 1 skipped", len(Names)-2); lines[len(lines)-1] != want {
		t.Fatalf("summary %q, want %q", lines[len(lines)-1], want)
	}
}

func TestWriteJSON(t *testing.T) {
	rep := NewReport("landlock", "proxied", allHeld())
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Tier   string `json:"tier"`
		Probes []struct {
			Name, Result, Evidence string
			Hashes                 any `json:"hashes"`
		} `json:"probes"`
		Held int `json:"held"`
	}
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Tier != "landlock" || len(back.Probes) != len(Names) || back.Held != len(Names) || back.Probes[0].Result != "held" || back.Probes[0].Hashes != nil {
		t.Fatalf("%+v", back)
	}
}

func TestMerge(t *testing.T) {
	h := Result{Name: "net.tfo4", Result: Held, Evidence: "EACCES"}
	if r := Merge(h, "a connection", ""); r.Result != Escaped || !strings.Contains(r.Evidence, "a connection") || !strings.Contains(r.Evidence, "EACCES") {
		t.Errorf("host escape must win: %+v", r)
	}
	if r := Merge(h, "", "listener gone"); r.Result != Error {
		t.Errorf("a failed host check turns held into error: %+v", r)
	}
	if r := Merge(Result{Result: Escaped}, "", "listener gone"); r.Result != Escaped {
		t.Errorf("the probe's own escape stays: %+v", r)
	}
	if r := Merge(h, "", ""); r.Result != Held || r.Evidence != h.Evidence {
		t.Errorf("nothing seen: %+v", r)
	}
}

func TestParseProbeOutput(t *testing.T) {
	b, _ := json.Marshal(allHeld()[:2])
	out := []byte("noise\n" + ResultsMarker + string(b) + "\nmore\n")
	rs, err := ParseProbeOutput(out)
	if err != nil || len(rs) != 2 || rs[0].Name != Names[0] {
		t.Fatalf("%v %+v", err, rs)
	}
	if _, err := ParseProbeOutput([]byte("nothing")); err == nil {
		t.Fatal("no marker must be an error")
	}
	if _, err := ParseProbeOutput([]byte(ResultsMarker + "{")); err == nil {
		t.Fatal("bad JSON must be an error")
	}
}
