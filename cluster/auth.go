package cluster

// Authenticated records (SPEC §7.7, docs/cluster.md "Trust model"): every
// value netproxy writes to Redis is sealed with HMAC-SHA256 under the key of
// cluster.key_file, bound to the Redis key and field it is stored under, so
// a client that can write Redis but does not hold the key can neither forge
// a record nor move a valid one elsewhere. Replays of an older valid record
// to the same place are refused by sequence numbers and tombstones (see
// replay.go).

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/netproxy/netproxy/cluster/settings"
)

// macDomain separates these MACs from any other use of the key.
const macDomain = "netproxy-cluster-record-v2\n"

// sealer seals and opens records under the cluster key.
type sealer struct{ key []byte }

// LoadKey reads cluster.key_file: at least settings.MinKeyBytes bytes, not
// readable or writable by group or others. Errors name cluster.key_file
// and never contain the key.
func LoadKey(path string) ([]byte, error) {
	if strings.TrimSpace(path) == "" {
		return nil, fmt.Errorf("cluster.key_file: required in cluster mode (a file of at least %d random bytes, mode 0600, the same on every replica)", settings.MinKeyBytes)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cluster.key_file: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cluster.key_file: %v", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("cluster.key_file: %s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("cluster.key_file: %s has mode %04o; the key must be private to netproxy's user: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	key := make([]byte, 4096)
	n, err := f.Read(key)
	if err != nil && n == 0 {
		return nil, fmt.Errorf("cluster.key_file: %s: %v", path, err)
	}
	key = key[:n]
	if len(key) < settings.MinKeyBytes {
		return nil, fmt.Errorf("cluster.key_file: %s holds %d bytes, at least %d are needed (head -c 32 /dev/urandom > %s)", path, len(key), settings.MinKeyBytes, path)
	}
	return key, nil
}

// mac is HMAC-SHA256(key, domain | redis key | field | payload); the
// lengths keep the parts unambiguous.
func (s sealer) mac(rkey, field, payload string) []byte {
	h := hmac.New(sha256.New, s.key)
	fmt.Fprintf(h, "%s%d:%s%d:%s", macDomain, len(rkey), rkey, len(field), field)
	h.Write([]byte(payload))
	return h.Sum(nil)
}

// seal returns the stored form of payload at (rkey, field): 64 hex digits
// of MAC, a dot, the payload.
func (s sealer) seal(rkey, field string, payload []byte) string {
	return hex.EncodeToString(s.mac(rkey, field, string(payload))) + "." + string(payload)
}

var errBadMAC = errors.New("the record's MAC does not verify under cluster.key_file (forged, corrupted, moved from another key, or written with another key)")

// open verifies v stored at (rkey, field) and returns its payload.
func (s sealer) open(rkey, field, v string) ([]byte, error) {
	m, payload, ok := strings.Cut(v, ".")
	if !ok || len(m) != 64 {
		return nil, errors.New("the record is not sealed (no MAC)")
	}
	want, err := hex.DecodeString(m)
	if err != nil {
		return nil, errors.New("the record is not sealed (no MAC)")
	}
	if !hmac.Equal(want, s.mac(rkey, field, payload)) {
		return nil, errBadMAC
	}
	return []byte(payload), nil
}

// streamField is what a change-stream entry's MAC is bound to besides the
// stream key: its type and origin node.
func streamField(typ, node string) string { return typ + "\n" + node }

// Record kinds of netproxy_cluster_rejected_total.
const (
	kindExecution   = "execution"
	kindAmendment   = "amendment"
	kindCache       = "session_cache"
	kindReview      = "review"
	kindPending     = "pending"
	kindDecision    = "decision"
	kindHeartbeat   = "heartbeat"
	kindChange      = "change"
	kindPlaceholder = "placeholder"
)

// reject counts and logs a record that is ignored. The log names where the
// record was and why, never its content.
func (c *Cluster) reject(kind, where string, err error) {
	c.m.rejected.WithLabelValues(kind).Inc()
	c.log.Warn("ignoring a cluster record that fails verification", "kind", kind, "where", where, "reason", err.Error())
}
