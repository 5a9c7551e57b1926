package audit

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// VerifyResult is what Verify found.
type VerifyResult struct {
	Lines    int    // chained lines checked
	Legacy   int    // lines before the chain began (written before seq existed)
	FirstSeq uint64 // seq of the first chained line read
	LastSeq  uint64
	// Break is the first place the chain does not hold; nil when it holds.
	Break *ChainBreak
}

// ChainBreak names the first line at which the chain breaks.
type ChainBreak struct {
	File string
	Line int    // 1-based line number in File
	Seq  uint64 // the line's seq (0 when it has none)
	Why  string
}

func (b *ChainBreak) Error() string {
	return fmt.Sprintf("%s:%d: seq %d: %s", b.File, b.Line, b.Seq, b.Why)
}

// maxVerifyLine bounds one audit line read by Verify.
const maxVerifyLine = 4 << 20

// Verify checks the hash chain of SPEC §7.5 across files, given oldest
// first (rotated files, gzip-compressed or not, then the current one):
// every line's seq follows the previous line's, and its prev is the SHA-256
// of the previous line's bytes. The first chained line may start anywhere
// (older files may be gone) unless it is seq 1, whose prev must be 64
// zeros. Lines without seq before the first chained line are counted as
// legacy; after it, a line without seq breaks the chain. When the chain
// state saved beside the last file (at its last rotation or shutdown) names
// the last line's seq, the last line's hash is checked against it too, so an
// edit of the very last line shows. err is an I/O error, not a break.
func Verify(files []string) (VerifyResult, error) {
	var res VerifyResult
	var prevHash [32]byte
	started := false
	for _, name := range files {
		if err := verifyFile(name, &res, &prevHash, &started); err != nil {
			return res, err
		}
		if res.Break != nil {
			return res, nil
		}
	}
	if started && len(files) > 0 {
		if seq, h, ok, err := LoadChainState(files[len(files)-1]); err == nil && ok && seq == res.LastSeq {
			if h != hex.EncodeToString(prevHash[:]) {
				res.Break = &ChainBreak{File: files[len(files)-1], Seq: seq, Line: -1,
					Why: "the last line differs from the one recorded in " + ChainStatePath(files[len(files)-1])}
			}
		}
	}
	return res, nil
}

func verifyFile(name string, res *VerifyResult, prevHash *[32]byte, started *bool) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%s: not a readable gzip file: %v", name, err)
		}
		defer zr.Close()
		in = zr
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxVerifyLine)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		var head struct {
			Seq  *uint64 `json:"seq"`
			Prev *string `json:"prev"`
		}
		brk := func(seq uint64, why string) {
			res.Break = &ChainBreak{File: name, Line: n, Seq: seq, Why: why}
		}
		if err := json.Unmarshal(line, &head); err != nil {
			brk(0, "not a JSON object: "+strings.TrimPrefix(err.Error(), "json: "))
			return nil
		}
		if head.Seq == nil || head.Prev == nil {
			if !*started {
				res.Legacy++
				continue
			}
			brk(0, "no seq/prev inside the chain")
			return nil
		}
		seq, prev := *head.Seq, *head.Prev
		want := hex.EncodeToString(prevHash[:])
		switch {
		case !*started && seq == 1 && prev != strings.Repeat("0", 64):
			brk(seq, "the first line ever must have prev 000…0")
			return nil
		case *started && seq != res.LastSeq+1:
			brk(seq, fmt.Sprintf("seq %d follows %d: a line is missing, repeated or moved", seq, res.LastSeq))
			return nil
		case *started && prev != want:
			brk(seq, "prev is not the hash of the line before: that line or this one was changed")
			return nil
		}
		if !*started {
			res.FirstSeq = seq
			*started = true
		}
		res.Lines++
		res.LastSeq = seq
		*prevHash = sha256.Sum256(line)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s:%d: %v", name, n+1, err)
	}
	return nil
}
