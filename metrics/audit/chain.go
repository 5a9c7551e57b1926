package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// chain is the position of the audit log's hash chain (SPEC §7.5): every
// line carries seq (consecutive from 1) and prev, the SHA-256 of the
// previous line's bytes without its newline (64 zeros before the first
// line ever). So a line removed, edited or moved shows at itself or at the
// next line when the chain is verified (`netproxy audit verify`).
type chain struct {
	seq  uint64   // the seq of the last line written (0: none yet)
	last [32]byte // the hash of that line
}

// appendLine appends r as the next line of the chain and advances it: the
// line AppendRecord writes with r's Seq and Prev set to the chain's (r's own
// are ignored), with seq and prev written straight into dst — no string per
// line (alloc_test.go holds both to the same bytes).
func (c *chain) appendLine(dst []byte, r *Record) []byte {
	start := len(dst)
	dst = appendBody(dst, r)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, c.seq+1, 10)
	dst = append(dst, `,"prev":"`...)
	dst = hex.AppendEncode(dst, c.last[:])
	dst = append(dst, "\"}\n"...)
	c.seq++
	c.last = sha256.Sum256(dst[start : len(dst)-1])
	return dst
}

// chainState is the file beside the audit log that carries the chain
// across a rotation: the new file starts empty, so a restart reads the
// position from here. It is written at every reopen and at close.
type chainState struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

// ChainStatePath is where the chain state of the audit log at path lives
// (a dot file beside it, so rotation globs such as audit.jsonl* miss it).
func ChainStatePath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".chain")
}

func saveChain(path string, c chain) error {
	b, _ := json.Marshal(chainState{Seq: c.seq, Hash: hex.EncodeToString(c.last[:])})
	dst := ChainStatePath(path)
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".chain-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// LoadChainState reads the chain state saved beside the audit log at path:
// the seq and hash of the last line written before the last rotation or
// shutdown. ok is false when there is none.
func LoadChainState(path string) (seq uint64, hash string, ok bool, err error) {
	b, err := os.ReadFile(ChainStatePath(path))
	if errors.Is(err, os.ErrNotExist) {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, err
	}
	var st chainState
	if err := json.Unmarshal(b, &st); err != nil || len(st.Hash) != 64 {
		return 0, "", false, fmt.Errorf("%s: not a chain state file", ChainStatePath(path))
	}
	return st.Seq, st.Hash, true, nil
}

// maxTail bounds how far back Open looks for the last complete line.
const maxTail = 1 << 20

// recoverChain finds where the chain stands: the last complete line of the
// open file f (its seq, and its hash as the next prev), or, for an empty
// file, the chain state saved at the last rotation. A file ending in a torn
// line (a crash mid-write) gets a newline so that the next line starts
// clean; the torn line then breaks the chain where it is, as it should.
// Lines written before the chain existed (no seq) start a new chain at 1.
func recoverChain(f *os.File, path string) (chain, error) {
	st, err := f.Stat()
	if err != nil {
		return chain{}, fmt.Errorf("audit: stat %s: %w", path, err)
	}
	size := st.Size()
	if size == 0 {
		seq, h, ok, err := LoadChainState(path)
		if err != nil {
			return chain{}, fmt.Errorf("audit: %w (remove it to start a new chain)", err)
		}
		if !ok {
			return chain{}, nil
		}
		var c chain
		c.seq = seq
		if _, err := hex.Decode(c.last[:], []byte(h)); err != nil {
			return chain{}, fmt.Errorf("audit: %s: bad hash", ChainStatePath(path))
		}
		return c, nil
	}
	n := min(size, maxTail)
	buf := make([]byte, n)
	rf, err := os.Open(path) // f is write-only (append)
	if err != nil {
		return chain{}, fmt.Errorf("audit: read the end of %s: %w", path, err)
	}
	_, err = rf.ReadAt(buf, size-n)
	rf.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return chain{}, fmt.Errorf("audit: read the end of %s: %w", path, err)
	}
	if buf[len(buf)-1] != '\n' {
		if _, err := f.Write([]byte{'\n'}); err != nil {
			return chain{}, fmt.Errorf("audit: terminate the torn last line of %s: %w", path, err)
		}
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			buf = buf[:i+1]
		} else {
			return chain{}, nil
		}
	}
	body := buf[:len(buf)-1]
	line := body[bytes.LastIndexByte(body, '\n')+1:]
	var head struct {
		Seq uint64 `json:"seq"`
	}
	if json.Unmarshal(line, &head) != nil || head.Seq == 0 {
		return chain{}, nil
	}
	return chain{seq: head.Seq, last: sha256.Sum256(line)}, nil
}
