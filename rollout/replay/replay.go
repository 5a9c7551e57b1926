// Package replay owns `netproxy replay`: it reads audit logs (plain,
// rotated or gzip-compressed JSON Lines), re-judges every network_decision
// against a candidate policy offline and reports, per host, the requests
// that would flip allow→block or block→allow, with the reasons.
//
// It must never resolve a name, call a reviewer or dial anything: a line
// is re-judged with the static answers of the policy and the addresses the
// audit line recorded (hostpolicy.Snapshot.Predict). It never prints
// anything of a line but its host, port, decision, reason and pattern.
package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strconv"

	"github.com/netproxy/netproxy/hostpolicy"
)

// Exit codes of `netproxy replay`.
const (
	ExitNoChange      = 0
	ExitNewlyBlocked  = 10
	ExitOnlyAllowed   = 11
	ExitError         = 2
	maxLineBytes      = 1 << 20
	maxReportedErrors = 100
)

// Policy is one side of the comparison: a compiled snapshot and whether
// approvals are on (a not_allowed is then predicted as ask).
type Policy struct {
	Snapshot  *hostpolicy.Snapshot
	Approvals bool
}

// Options configure a Replayer.
type Options struct {
	Candidate Policy
	// Against, when set, is the live policy re-judged the same way; else
	// the decision each audit line recorded is the baseline.
	Against *Policy
	// Strict stops at the first malformed line.
	Strict bool
	// OnMalformed is told about each malformed line (file:line and why);
	// nil ignores them (they are still counted).
	OnMalformed func(LineError)
}

// LineError is one malformed audit line.
type LineError struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Err  string `json:"error"`
}

func (e LineError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Err) }

// Line is the part of a network_decision audit line a replay uses.
type Line struct {
	Event    string `json:"event"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Source   string `json:"source"`
	Protocol string `json:"protocol"`
	Host     string `json:"host"`
	Port     uint16 `json:"port"`
	Method   string `json:"method"`
	Pattern  string `json:"pattern"`
	Level    string `json:"level"`
	// Rule is the request rule that decided (SPEC §3.10); the path is not
	// audited, so a replay carries the live rule outcome over instead of
	// re-judging it (docs/policy.md, request rules).
	Rule        *int     `json:"rule"`
	Addrs       []string `json:"addrs"`
	ExecutionID string   `json:"execution_id"`
}

// ParseLine decodes one audit line. A line of another event returns
// ok=false and no error; a line that is not a JSON object, or a
// network_decision without a valid decision, host or address, is an error.
func ParseLine(b []byte) (Line, bool, error) {
	var l Line
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return l, false, nil
	}
	if !scanLine(b, &l) {
		l = Line{}
		if err := json.Unmarshal(b, &l); err != nil {
			return l, false, fmt.Errorf("not a JSON audit object: %v", err)
		}
	}
	if l.Event != "network_decision" {
		if l.Event == "" {
			return l, false, errors.New(`no "event" key`)
		}
		return l, false, nil
	}
	switch hostpolicy.Verdict(l.Decision) {
	case hostpolicy.Allow, hostpolicy.Deny, hostpolicy.Ask:
	default:
		return l, false, fmt.Errorf("decision %q is not allow, deny or ask", l.Decision)
	}
	if l.Host == "" {
		return l, false, errors.New(`"host" is empty`)
	}
	for i, a := range l.Addrs {
		if _, err := netip.ParseAddr(a); err != nil {
			return l, false, fmt.Errorf("addrs[%d] %q is not an IP address", i, a)
		}
	}
	return l, true, nil
}

// untouched reports the reasons decided outside the policy chain: a
// candidate policy cannot change them.
func untouched(r hostpolicy.Reason) bool {
	switch r {
	case hostpolicy.ReasonAttributionRejected, hostpolicy.ReasonMITMHookDenied, "proxy_loop", "credential_misuse":
		return true
	}
	return false
}

// Change counts one kind of flip for a host.
type Change struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Reason  string `json:"reason"`
	Pattern string `json:"pattern,omitempty"`
	Count   int    `json:"count"`
}

// Host is one host's flips.
type Host struct {
	Host        string   `json:"host"`
	AllowBlock  int      `json:"allow_to_block"`
	BlockAllow  int      `json:"block_to_allow"`
	Changes     []Change `json:"changes"`
	changeIndex map[Change]int
}

// Report is the outcome of a replay.
type Report struct {
	Files        []string    `json:"files"`
	Lines        int         `json:"lines"`
	Decisions    int         `json:"decisions"`
	Malformed    int         `json:"malformed"`
	Changed      int         `json:"changed"`
	NewlyBlocked int         `json:"newly_blocked"`
	NewlyAllowed int         `json:"newly_allowed"`
	Hosts        []*Host     `json:"hosts"`
	Errors       []LineError `json:"errors,omitempty"`

	hosts map[string]*Host
}

// ExitCode is 10 when some request would be newly blocked, 11 when some
// would only be newly allowed, else 0.
func (r *Report) ExitCode() int {
	switch {
	case r.NewlyBlocked > 0:
		return ExitNewlyBlocked
	case r.NewlyAllowed > 0:
		return ExitOnlyAllowed
	}
	return ExitNoChange
}

// Replayer re-judges audit lines. Not safe for concurrent use.
type Replayer struct {
	o   Options
	rep *Report
}

// New returns a Replayer; the candidate snapshot is required.
func New(o Options) (*Replayer, error) {
	if o.Candidate.Snapshot == nil {
		return nil, errors.New("replay: no candidate policy")
	}
	return &Replayer{o: o, rep: &Report{hosts: map[string]*Host{}, Files: []string{}, Hosts: []*Host{}}}, nil
}

// Report returns the report so far, hosts sorted by flips (most first).
func (r *Replayer) Report() *Report {
	rep := r.rep
	rep.Hosts = rep.Hosts[:0]
	for _, h := range rep.hosts {
		sort.Slice(h.Changes, func(i, j int) bool {
			if h.Changes[i].Count != h.Changes[j].Count {
				return h.Changes[i].Count > h.Changes[j].Count
			}
			return h.Changes[i].Reason < h.Changes[j].Reason
		})
		rep.Hosts = append(rep.Hosts, h)
	}
	sort.Slice(rep.Hosts, func(i, j int) bool {
		a, b := rep.Hosts[i], rep.Hosts[j]
		if a.AllowBlock+a.BlockAllow != b.AllowBlock+b.BlockAllow {
			return a.AllowBlock+a.BlockAllow > b.AllowBlock+b.BlockAllow
		}
		return a.Host < b.Host
	})
	return rep
}

// File replays one audit file (gzip-compressed when it starts with the
// gzip magic). A malformed line is reported and skipped unless Strict; an
// unreadable file is an error.
func (r *Replayer) File(path string) error {
	f, err := os.Open(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("%s: cannot read audit file: %v", path, err)
	}
	defer f.Close()
	r.rep.Files = append(r.rep.Files, path)
	br := bufio.NewReaderSize(f, 256<<10)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%s: not a readable gzip file: %v", path, err)
		}
		defer zr.Close()
		in = bufio.NewReaderSize(zr, 256<<10)
	}
	return r.Stream(path, in)
}

// Stream replays the lines read from in, naming them name:line.
func (r *Replayer) Stream(name string, in io.Reader) error {
	br, ok := in.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(in, 256<<10)
	}
	n := 0
	var long []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if !tooLong && len(long)+len(chunk) <= maxLineBytes {
				long = append(long, chunk...)
			} else {
				tooLong, long = true, long[:0]
			}
			continue
		}
		line := chunk
		if len(long) > 0 {
			line = append(long, chunk...)
			long = long[:0]
		}
		if len(line) > 0 || tooLong {
			n++
			var lerr error
			if tooLong || len(line) > maxLineBytes {
				lerr = r.malformed(name, n, errors.New("line longer than 1 MiB"))
				r.rep.Lines++
			} else {
				lerr = r.line(name, n, line)
			}
			tooLong = false
			if lerr != nil {
				return lerr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s:%d: read error: %v", name, n, err)
		}
	}
}

// line handles one line; it returns an error only when Strict stops.
func (r *Replayer) line(name string, n int, b []byte) error {
	r.rep.Lines++
	l, ok, err := ParseLine(b)
	if err != nil {
		return r.malformed(name, n, err)
	}
	if !ok {
		return nil
	}
	r.rep.Decisions++
	r.judge(l)
	return nil
}

func (r *Replayer) malformed(name string, n int, err error) error {
	r.rep.Malformed++
	le := LineError{File: name, Line: n, Err: err.Error()}
	if len(r.rep.Errors) < maxReportedErrors {
		r.rep.Errors = append(r.rep.Errors, le)
	}
	if r.o.OnMalformed != nil {
		r.o.OnMalformed(le)
	}
	if r.o.Strict {
		return le
	}
	return nil
}

// Recorded turns an audit line into the live decision it recorded.
func Recorded(l Line) (hostpolicy.Request, hostpolicy.Decision) {
	req := hostpolicy.Request{Host: l.Host, Port: l.Port, Protocol: hostpolicy.Protocol(l.Protocol), Method: l.Method, ExecutionID: l.ExecutionID}
	d := hostpolicy.Decision{
		Verdict: hostpolicy.Verdict(l.Decision), Reason: hostpolicy.Reason(l.Reason), Source: hostpolicy.Source(l.Source),
		Host: l.Host, Port: l.Port, Pattern: l.Pattern, Level: l.Level,
	}
	if l.Rule != nil && *l.Rule >= 0 {
		d.Rule = *l.Rule + 1
		d.RuleAllowed = d.Allowed()
		if d.Reason == hostpolicy.ReasonRequestDenied {
			d.Cause = hostpolicy.CauseRule
		}
	}
	if len(l.Addrs) > 0 {
		d.Addrs = make([]netip.Addr, 0, len(l.Addrs))
		for _, a := range l.Addrs {
			if ad, err := netip.ParseAddr(a); err == nil {
				d.Addrs = append(d.Addrs, ad)
			}
		}
	}
	return req, d
}

// Judge predicts the decision of p for one recorded line.
func Judge(p Policy, l Line) hostpolicy.Decision {
	req, live := Recorded(l)
	return judgeRecorded(p, req, live)
}

func judgeRecorded(p Policy, req hostpolicy.Request, live hostpolicy.Decision) hostpolicy.Decision {
	if untouched(live.Reason) {
		return live
	}
	return p.Snapshot.Predict(req, live, hostpolicy.PredictOptions{
		Approvals: p.Approvals, Inner: hostpolicy.IsInner(req.Protocol, req.Method),
	})
}

func (r *Replayer) judge(l Line) {
	req, base := Recorded(l)
	live := base
	if r.o.Against != nil {
		base = judgeRecorded(*r.o.Against, req, live)
	}
	cand := judgeRecorded(r.o.Candidate, req, live)
	was, now := base.Allowed(), cand.Allowed()
	if was == now {
		return
	}
	rep := r.rep
	rep.Changed++
	h := rep.hosts[l.Host]
	if h == nil {
		h = &Host{Host: l.Host, Changes: []Change{}, changeIndex: map[Change]int{}}
		rep.hosts[l.Host] = h
	}
	c := Change{From: string(base.Verdict), To: string(cand.Verdict)}
	if now {
		rep.NewlyAllowed++
		h.BlockAllow++
		// What no longer blocks it: the baseline's reason.
		c.Reason, c.Pattern = string(base.Reason), base.Pattern
	} else {
		rep.NewlyBlocked++
		h.AllowBlock++
		c.Reason, c.Pattern = string(cand.Reason), cand.Pattern
		if cand.Level != "" {
			c.Reason += " (" + cand.Level + ")"
		}
	}
	if i, ok := h.changeIndex[c]; ok {
		h.Changes[i].Count++
		return
	}
	h.changeIndex[c] = len(h.Changes)
	c.Count = 1
	h.Changes = append(h.Changes, c)
}

// WriteText prints the report for people.
func (rep *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "netproxy replay: %d network decisions in %d lines of %d file(s)", rep.Decisions, rep.Lines, len(rep.Files))
	if rep.Malformed > 0 {
		fmt.Fprintf(w, ", %d malformed line(s) skipped", rep.Malformed)
	}
	fmt.Fprintln(w)
	if rep.Changed == 0 {
		fmt.Fprintln(w, "no request would change")
		return
	}
	fmt.Fprintf(w, "%d request(s) would change: %d allow→block, %d block→allow\n\n", rep.Changed, rep.NewlyBlocked, rep.NewlyAllowed)
	width := len("HOST")
	for _, h := range rep.Hosts {
		width = max(width, len(h.Host))
	}
	fmt.Fprintf(w, "%-*s  %11s  %11s  %s\n", width, "HOST", "ALLOW→BLOCK", "BLOCK→ALLOW", "REASONS")
	for _, h := range rep.Hosts {
		var reasons []byte
		for i, c := range h.Changes {
			if i > 0 {
				reasons = append(reasons, "; "...)
			}
			reasons = append(reasons, c.From+"→"+c.To+" "+c.Reason...)
			if c.Pattern != "" {
				reasons = append(reasons, " ["+c.Pattern+"]"...)
			}
			reasons = append(reasons, " ×"+strconv.Itoa(c.Count)...)
		}
		fmt.Fprintf(w, "%-*s  %11d  %11d  %s\n", width, printable(h.Host), h.AllowBlock, h.BlockAllow, printable(string(reasons)))
	}
}

// WriteJSON prints the report as one JSON object.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// printable quotes s when it holds a byte a terminal could act on.
func printable(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return strconv.Quote(s)
		}
	}
	return s
}
