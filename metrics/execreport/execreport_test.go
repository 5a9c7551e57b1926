package execreport

import (
	"bytes"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	good := `{"requirement":"needs_approval","source":"heuristics","command":["rm","-rf","x"],"execution_id":"e1"}`
	r, err := Decode(strings.NewReader(good))
	if err != nil || r.Requirement != NeedsApproval || r.ExecutionID != "e1" {
		t.Fatalf("Decode(good) = %+v, %v", r, err)
	}
	for bad, key := range map[string]string{
		`{}`: "requirement",
		`{"requirement":"maybe","source":"prefix"}`:     "requirement",
		`{"requirement":"skip"}`:                        "source",
		`{"requirement":"skip","source":"x","extra":1}`: "extra",
		`{"requirement":"skip","source":"x"} {}`:        "trailing",
		`[1]`:                                           "invalid JSON",
	} {
		if _, err := Decode(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("Decode(%s) error = %v, want one naming %q", bad, err, key)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"requirement":"skip","source":"prefix"}`))
	f.Add([]byte(`{"requirement":"forbidden","source":"heuristics","command":["a"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(bytes.NewReader(b))
		if err == nil && r.Validate() != nil {
			t.Fatalf("accepted an invalid report %+v", r)
		}
	})
}
