package guardian

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits on untrusted verdict input.
const (
	maxVerdictBytes   = 64 << 10
	maxRationaleRunes = 2000
	maxRiskRunes      = 32
)

// ErrNoVerdict is wrapped by every parse failure.
var ErrNoVerdict = errors.New("unparsable guardian verdict")

// ParseVerdict parses a JSON object {"decision","rationale","risk"} strictly:
// decision must be "allow" or "deny" (case and surrounding space ignored);
// rationale and risk must be strings when present. Unknown fields are ignored
// so endpoints may add their own.
func ParseVerdict(b []byte) (Verdict, error) {
	if len(b) > maxVerdictBytes {
		return Verdict{}, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrNoVerdict, len(b), maxVerdictBytes)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil {
		return Verdict{}, fmt.Errorf("%w: %v", ErrNoVerdict, err)
	}
	if raw == nil {
		return Verdict{}, fmt.Errorf("%w: not a JSON object", ErrNoVerdict)
	}
	if dec.More() {
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
// required and normalised, rationale is clipped, risk normalised.
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
	return Verdict{Decision: decision, Rationale: clipRunes(rationale, maxRationaleRunes), Risk: normalizeRisk(risk)}, nil
}

// normalizeDecision accepts "allow" and "deny" only.
func normalizeDecision(d string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(d)) {
	case DecisionAllow:
		return DecisionAllow, nil
	case DecisionDeny:
		return DecisionDeny, nil
	}
	return "", fmt.Errorf("%w: decision %q is neither \"allow\" nor \"deny\"", ErrNoVerdict, clipRunes(d, 40))
}

// ExtractVerdict finds the verdict object in a language model's reply: the
// whole reply, or the content of a ```json fence, or the span from the first
// '{' to the last '}'. Anything that does not parse strictly is an error.
func ExtractVerdict(content string) (Verdict, error) {
	s := strings.TrimSpace(content)
	if v, err := ParseVerdict([]byte(s)); err == nil {
		return v, nil
	}
	if i := strings.Index(s, "```"); i >= 0 {
		rest := s[i+3:]
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			rest = rest[nl+1:] // drop the fence's language tag
		}
		if j := strings.Index(rest, "```"); j >= 0 {
			if v, err := ParseVerdict([]byte(strings.TrimSpace(rest[:j]))); err == nil {
				return v, nil
			}
		}
	}
	i, j := strings.IndexByte(s, '{'), strings.LastIndexByte(s, '}')
	if i >= 0 && j > i {
		return ParseVerdict([]byte(s[i : j+1]))
	}
	return Verdict{}, fmt.Errorf("%w: no JSON object in the model's reply", ErrNoVerdict)
}

// normalizeRisk lower-cases, trims and bounds a free-form risk label.
func normalizeRisk(r string) string {
	return clipRunes(strings.ToLower(strings.TrimSpace(r)), maxRiskRunes)
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
