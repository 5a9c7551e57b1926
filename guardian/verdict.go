package guardian

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Limits on untrusted verdict input.
const (
	maxVerdictBytes   = 64 << 10
	maxRationaleRunes = 2000
)

// ErrNoVerdict is wrapped by every parse failure.
var ErrNoVerdict = errors.New("unparsable guardian verdict")

// verdictFields are the only keys a verdict object may carry.
var verdictFields = map[string]bool{"decision": true, "rationale": true, "risk": true}

// ParseVerdict parses exactly one JSON object {"decision","rationale","risk"}
// strictly: decision must be allow_once, allow_session or deny ("allow" is
// read as allow_once; case and surrounding space ignored) — never
// allow_always or deny_always, which amend the policy and stay with humans;
// rationale must be a string; risk, when present, low, medium or high. Any
// other key, a duplicate key, trailing data or a second object is an error.
func ParseVerdict(b []byte) (Verdict, error) {
	if len(b) > maxVerdictBytes {
		return Verdict{}, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrNoVerdict, len(b), maxVerdictBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return Verdict{}, fmt.Errorf("%w: %v", ErrNoVerdict, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Verdict{}, fmt.Errorf("%w: not a JSON object", ErrNoVerdict)
	}
	raw := map[string]json.RawMessage{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return Verdict{}, fmt.Errorf("%w: %v", ErrNoVerdict, err)
		}
		k, _ := kt.(string)
		if !verdictFields[k] {
			return Verdict{}, fmt.Errorf("%w: unknown field %q (only decision, rationale, risk)", ErrNoVerdict, clipRunes(k, 40))
		}
		if _, dup := raw[k]; dup {
			return Verdict{}, fmt.Errorf("%w: duplicate field %q", ErrNoVerdict, k)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return Verdict{}, fmt.Errorf("%w: %v", ErrNoVerdict, err)
		}
		raw[k] = v
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return Verdict{}, fmt.Errorf("%w: %v", ErrNoVerdict, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Verdict{}, fmt.Errorf("%w: trailing data after the JSON object", ErrNoVerdict)
	}
	str := func(key string) (string, bool, error) {
		v, ok := raw[key]
		if !ok || string(v) == "null" {
			return "", false, nil
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", true, fmt.Errorf("%w: %q must be a string", ErrNoVerdict, key)
		}
		return s, true, nil
	}
	return verdictFromFields(str, `missing "decision"`)
}

// verdictFromFields applies the verdict rules to an answer's fields, read
// with field (found is false for an absent or null field): decision is
// required and normalised, rationale is clipped, risk checked.
// noDecision says, in the backend's terms, that decision is missing.
func verdictFromFields(field func(key string) (s string, found bool, err error), noDecision string) (Verdict, error) {
	d, ok, err := field("decision")
	if err != nil {
		return Verdict{}, err
	}
	if !ok {
		return Verdict{}, fmt.Errorf("%w: %s", ErrNoVerdict, noDecision)
	}
	decision, err := normalizeDecision(d)
	if err != nil {
		return Verdict{}, err
	}
	rationale, _, err := field("rationale")
	if err != nil {
		return Verdict{}, err
	}
	risk, _, err := field("risk")
	if err != nil {
		return Verdict{}, err
	}
	r, err := normalizeRisk(risk)
	if err != nil {
		return Verdict{}, err
	}
	return Verdict{Decision: decision, Rationale: clipRunes(rationale, maxRationaleRunes), Risk: r}, nil
}

// normalizeDecision accepts allow_once, allow_session and deny ("allow" is
// allow_once). allow_always and deny_always are refused by name: a Guardian
// never amends the policy.
func normalizeDecision(d string) (string, error) {
	switch v := strings.ToLower(strings.TrimSpace(d)); v {
	case DecisionAllow, DecisionAllowOnce:
		return DecisionAllowOnce, nil
	case DecisionAllowSession:
		return DecisionAllowSession, nil
	case DecisionDeny:
		return DecisionDeny, nil
	case "allow_always", "deny_always":
		return "", fmt.Errorf("%w: decision %q amends the policy; only a human may give it (Guardian answers allow_once, allow_session or deny)", ErrNoVerdict, v)
	}
	return "", fmt.Errorf("%w: decision %q is not allow_once, allow_session or deny", ErrNoVerdict, clipRunes(d, 40))
}

// normalizeRisk accepts "", low, medium and high (case and space ignored).
func normalizeRisk(r string) (string, error) {
	switch v := strings.ToLower(strings.TrimSpace(r)); v {
	case "", RiskLow, RiskMedium, RiskHigh:
		return v, nil
	}
	return "", fmt.Errorf("%w: risk %q is not low, medium or high", ErrNoVerdict, clipRunes(r, 40))
}

// ExtractVerdict reads the verdict from a language model's reply: the whole
// reply must be one JSON object, optionally wrapped in a single ``` fence
// that is itself the whole reply (some OpenAI-compatible servers ignore
// response_format). Prose around the object, two objects, or an object
// somewhere inside text is an error: a reviewer that cannot follow the
// format is not trusted to have judged.
func ExtractVerdict(content string) (Verdict, error) {
	s := strings.TrimSpace(content)
	if strings.HasPrefix(s, "```") && strings.HasSuffix(s, "```") && len(s) >= 6 {
		inner := s[3 : len(s)-3]
		nl := strings.IndexByte(inner, '\n')
		if nl < 0 || strings.Contains(inner, "```") {
			return Verdict{}, fmt.Errorf("%w: malformed code fence in the model's reply", ErrNoVerdict)
		}
		if tag := strings.TrimSpace(inner[:nl]); tag != "" && tag != "json" {
			return Verdict{}, fmt.Errorf("%w: code fence tagged %q, want json", ErrNoVerdict, clipRunes(tag, 20))
		}
		s = strings.TrimSpace(inner[nl+1:])
	}
	if !strings.HasPrefix(s, "{") {
		return Verdict{}, fmt.Errorf("%w: the model's reply is not one JSON object", ErrNoVerdict)
	}
	return ParseVerdict([]byte(s))
}

// clipRunes truncates s to n runes and replaces invalid UTF-8, so a verdict
// can be logged and stored safely.
func clipRunes(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}
