package cluster

// Exec amendments (SPEC §7.7): the prefix rule an exec review's
// allow_always adds is stored sealed under P xamend and announced on the
// stream, so every replica appends it to its rules file as it mirrors a
// network amendment. Each carries a sequence number like every versioned
// record; a rule is only ever added, so a replayed copy re-adds a line the
// file already holds (the rules package never writes a line twice).

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// execAmend is one exec amendment: the prefix rule's tokens.
type execAmend struct {
	Tokens []string `json:"tokens"`
	Seq    uint64   `json:"seq"`
}

// execAmendField is the P xamend field of tokens: the SHA-256 of their JSON.
func execAmendField(tokens []string) string {
	b, _ := json.Marshal(tokens)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func execAmendItem(field string) string { return "x\x00" + field }

// parseExecAmend parses one exec amendment (its MAC verified) stored under
// field.
func parseExecAmend(field string, payload []byte) (execAmend, error) {
	var a execAmend
	if err := json.Unmarshal(payload, &a); err != nil {
		return a, fmt.Errorf("exec amendment: %v", err)
	}
	if len(a.Tokens) == 0 {
		return a, errors.New("exec amendment has no tokens")
	}
	if field != "" && execAmendField(a.Tokens) != field {
		return a, errors.New("exec amendment stored under another field")
	}
	return a, nil
}

// acceptExecAmend applies a verified exec amendment unless an older copy.
func (c *Cluster) acceptExecAmend(a execAmend, where string) {
	if !c.replay.accept(execAmendItem(execAmendField(a.Tokens)), a.Seq) {
		c.reject(kindAmendment, where, errReplayed)
		return
	}
	if c.rules == nil {
		return
	}
	if _, err := c.rules.AppendPrefixRule(a.Tokens); err != nil {
		c.log.Error("mirroring a cluster exec amendment into the rules file failed", "error", err)
	}
}

// loadExecAmends reads and verifies every stored exec amendment.
func (c *Cluster) loadExecAmends(all map[string]string) []execAmend {
	out := make([]execAmend, 0, len(all))
	for field, v := range all {
		payload, err := c.seal.open(c.k.xamend(), field, v)
		var a execAmend
		if err == nil {
			a, err = parseExecAmend(field, payload)
		}
		if err != nil {
			c.reject(kindAmendment, c.k.xamend()+" "+field, err)
			continue
		}
		out = append(out, a)
	}
	return out
}
