package audit

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func writeN(t *testing.T, path string, n int, tag string) {
	t.Helper()
	w, err := Open(path, 64, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		w.ExecDecision(ExecEvent{Requirement: "skip", Reason: tag, Source: "prefix"})
	}
	closeW(t, w)
}

// TestChainContinuesAcrossRestartAndRotation: seq is consecutive from 1 and
// prev is the hash of the previous line, across a restart (the file's tail)
// and a rotation followed by a restart (the chain state beside the file).
func TestChainContinuesAcrossRestartAndRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	writeN(t, path, 3, "a")
	writeN(t, path, 2, "b") // restart: continues from the tail
	rotated := path + ".1"
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	writeN(t, path, 2, "c") // restart after rotation: from the chain state
	w, err := Open(path, 64, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.ExecDecision(ExecEvent{Requirement: "skip", Reason: "d"})
	os.Rename(path, path+".2")
	if err := w.Reopen(); err != nil { // rotation while running
		t.Fatal(err)
	}
	w.ExecDecision(ExecEvent{Requirement: "skip", Reason: "e"})
	closeW(t, w)

	var all []byte
	for _, f := range []string{rotated, path + ".2", path} {
		b, _ := os.ReadFile(f)
		all = append(all, b...)
	}
	lines := bytes.Split(bytes.TrimSuffix(all, []byte("\n")), []byte("\n"))
	if len(lines) != 9 {
		t.Fatalf("%d lines", len(lines))
	}
	prev := strings.Repeat("0", 64)
	for i, l := range lines {
		want := []byte(`,"seq":` + strconv.Itoa(i+1) + `,"prev":"` + prev + `"}`)
		if !bytes.HasSuffix(l, want) {
			t.Fatalf("line %d: %s\nwant suffix %s", i+1, l, want)
		}
		h := sha256.Sum256(l)
		prev = hex.EncodeToString(h[:])
	}
	res, err := Verify([]string{rotated, path + ".2", path})
	if err != nil || res.Break != nil || res.Lines != 9 || res.FirstSeq != 1 || res.LastSeq != 9 {
		t.Fatalf("verify: %+v %v", res, err)
	}
}

// TestVerifyFindsEveryTamper: an edited, removed, reordered or inserted
// line breaks the chain at itself or the next line; the last line is
// checked against the saved chain state.
func TestVerifyFindsEveryTamper(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	writeN(t, path, 6, "x")
	orig, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(orig), "\n")
	lines = lines[:len(lines)-1]
	for _, c := range []struct {
		name    string
		edit    func([]string) []string
		atLine  int
		wantSub string
	}{
		{"edited content", func(l []string) []string { l[2] = strings.Replace(l[2], `"reason":"x"`, `"reason":"y"`, 1); return l }, 4, "changed"},
		{"removed", func(l []string) []string { return append(l[:2:2], l[3:]...) }, 3, "missing"},
		{"reordered", func(l []string) []string { l[1], l[2] = l[2], l[1]; return l }, 2, "seq"},
		{"seq rewritten", func(l []string) []string { l[3] = strings.Replace(l[3], `"seq":4`, `"seq":9`, 1); return l }, 4, "seq"},
		{"last line edited", func(l []string) []string { l[5] = strings.Replace(l[5], `"reason":"x"`, `"reason":"z"`, 1); return l }, -1, "last line"},
		{"garbage", func(l []string) []string { l[0] = "{nope\n"; return l }, 1, "JSON"},
		{"first prev forged", func(l []string) []string {
			l[0] = strings.Replace(l[0], strings.Repeat("0", 64), strings.Repeat("1", 64), 1)
			return l
		}, 1, "000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cp := append([]string(nil), lines...)
			os.WriteFile(path, []byte(strings.Join(c.edit(cp), "")), 0o600)
			res, err := Verify([]string{path})
			if err != nil || res.Break == nil {
				t.Fatalf("no break found: %+v %v", res, err)
			}
			if res.Break.Line != c.atLine || !strings.Contains(res.Break.Why, c.wantSub) {
				t.Fatalf("break %+v, want line %d mentioning %q", res.Break, c.atLine, c.wantSub)
			}
		})
	}
	os.WriteFile(path, orig, 0o600)
	if res, err := Verify([]string{path}); err != nil || res.Break != nil {
		t.Fatalf("untouched file: %+v %v", res, err)
	}
	// gzip-compressed rotated files verify too.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(orig)
	zw.Close()
	os.WriteFile(path+".1.gz", gz.Bytes(), 0o600)
	if res, err := Verify([]string{path + ".1.gz"}); err != nil || res.Break != nil || res.Lines != 6 {
		t.Fatalf("gzip: %+v %v", res, err)
	}
}

// TestChainTornLineAndLegacy: a torn last line (a crash mid-write) is
// terminated and the chain continues from the last complete line; lines
// from before the chain existed are counted as legacy.
func TestChainTornLineAndLegacy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	os.WriteFile(path, []byte(`{"ts":"x","event":"network_decision"}`+"\n"), 0o600)
	writeN(t, path, 2, "a")
	res, err := Verify([]string{path})
	if err != nil || res.Break != nil || res.Legacy != 1 || res.Lines != 2 || res.FirstSeq != 1 {
		t.Fatalf("legacy then chain: %+v %v", res, err)
	}
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o600)
	f.WriteString(`{"ts":"torn`)
	f.Close()
	writeN(t, path, 1, "b")
	b, _ := os.ReadFile(path)
	if !bytes.Contains(b, []byte("{\"ts\":\"torn\n")) || !bytes.Contains(b, []byte(`"seq":3,`)) {
		t.Fatalf("after a torn line:\n%s", b)
	}
	if res, _ := Verify([]string{path}); res.Break == nil || res.Break.Line != 4 {
		t.Fatalf("the torn line must break the chain where it is: %+v", res.Break)
	}
}
