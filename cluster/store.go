// Package cluster owns cluster mode (docs/cluster.md): the Redis store that
// several netproxy replicas share — its versioned key schema under
// key_prefix, node heartbeats, the change stream every replica follows —
// and the adapters that plug it into the approval service (one review per
// key cluster-wide, the pending list, decisions, session caches,
// amendments) and into the execution registry (executions registered on
// one replica attributed on all, ended everywhere).
//
// It must never store or log an execution token (only its SHA-256 digest),
// never half-apply data it cannot parse (an entry is parsed whole before
// anything is changed, and a foreign schema version is refused), and never
// sit on the data path of a cached decision: a replica keeps everything it
// needs for those locally and Redis is asked only to open a review.
package cluster

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"crypto/sha256"

	"github.com/netproxy/netproxy/approvalsvc"
	"github.com/netproxy/netproxy/attribution"
)

// SchemaVersion is the version of the key schema below, stored at
// <prefix>schema. A replica refuses a prefix holding another version.
const SchemaVersion = "2"

// Key schema v2, all under the prefix P. Every value but P schema and
// P seq is sealed (auth.go): "<64 hex MAC>.<payload>", the MAC bound to
// the Redis key and field (for stream entries: type and origin node).
//
//	P schema               string  "2"
//	P seq                  string  counter of versioned records (amendments, session caches)
//	P events               stream  changes: fields t (type), n (origin node), d (sealed JSON)
//	P nodes                hash    node id → nodeInfo JSON (heartbeat, stream position)
//	P execs                hash    execution id → execRecord JSON (token digest, never the token)
//	P tokens               hash    token digest (hex) → execution id (the read-through index)
//	P placeholders         hash    sha256(placeholder body) (hex) → {exec, cred, node} JSON (never the secret)
//	P amend                hash    host → amendChange JSON (verdict, protocol, seq)
//	P cache:<session>      hash    reviewField JSON → cacheValue JSON (outcome, seq)
//	P xamend               hash    sha256(tokens JSON) (hex) → execAmend JSON (an exec review's prefix rule, seq)
//	P review:<sha256(key)> string  "<approval id>|<deadline unix ms>" while a review is open
//	P slots                zset    approval id → expiry (unix ms): the reviews open cluster-wide (bounds.go; not sealed)
//	P slots:<session>      zset    the same per session
//	P pending              hash    approval id → pendingRecord JSON (human reviews waiting)
//	P decision:<id>        string  approvalsvc.ClusterDecision JSON, kept one hour
type keys struct{ p string }

func (k keys) schema() string           { return k.p + "schema" }
func (k keys) events() string           { return k.p + "events" }
func (k keys) seq() string              { return k.p + "seq" }
func (k keys) tokens() string           { return k.p + "tokens" }
func (k keys) placeholders() string     { return k.p + "placeholders" }
func (k keys) nodes() string            { return k.p + "nodes" }
func (k keys) execs() string            { return k.p + "execs" }
func (k keys) amend() string            { return k.p + "amend" }
func (k keys) cache(sess string) string { return k.p + "cache:" + sess }
func (k keys) pending() string          { return k.p + "pending" }
func (k keys) xamend() string           { return k.p + "xamend" }
func (k keys) slots() string            { return k.p + "slots" }
func (k keys) sessionSlots(sess string) string {
	return k.p + "slots:" + sess
}
func (k keys) decision(id string) string {
	return k.p + "decision:" + id
}
func (k keys) review(rk approvalsvc.ReviewKey) string {
	b, _ := json.Marshal(rk)
	sum := sha256.Sum256(b)
	return k.p + "review:" + hex.EncodeToString(sum[:])
}

// cachePattern matches every session cache key (glob characters of the
// prefix escaped).
func (k keys) cachePattern() string {
	var b strings.Builder
	for _, r := range k.p + "cache:" {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteString("*")
	return b.String()
}

// reviewField is the field of a session cache entry: the review key
// without the session, as a JSON array (unambiguous whatever the strings):
// [env, host, protocol, port] for a network review, ["exec", env, identity]
// for an exec review.
func reviewField(k approvalsvc.ReviewKey) string {
	v := []any{k.Env, k.Host, k.Protocol, k.Port}
	if k.Exec() {
		v = []any{"exec", k.Env, k.Ident}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// parseReviewField is the inverse of reviewField.
func parseReviewField(session, field string) (approvalsvc.ReviewKey, error) {
	var parts []json.RawMessage
	if err := json.Unmarshal([]byte(field), &parts); err == nil && len(parts) == 3 {
		k := approvalsvc.ReviewKey{Session: session}
		var kind string
		if json.Unmarshal(parts[0], &kind) != nil || kind != "exec" || json.Unmarshal(parts[1], &k.Env) != nil ||
			json.Unmarshal(parts[2], &k.Ident) != nil || !k.Exec() {
			return approvalsvc.ReviewKey{}, errors.New(`session cache field is not ["exec", env, identity]`)
		}
		return k, nil
	}
	if len(parts) != 4 {
		return approvalsvc.ReviewKey{}, errors.New("session cache field is not [env, host, protocol, port]")
	}
	k := approvalsvc.ReviewKey{Session: session}
	if json.Unmarshal(parts[0], &k.Env) != nil || json.Unmarshal(parts[1], &k.Host) != nil ||
		json.Unmarshal(parts[2], &k.Protocol) != nil || json.Unmarshal(parts[3], &k.Port) != nil || k.Host == "" {
		return approvalsvc.ReviewKey{}, errors.New("session cache field is not [env, host, protocol, port]")
	}
	return k, nil
}

// nodeInfo is one replica's heartbeat.
type nodeInfo struct {
	Heartbeat int64  `json:"heartbeat_ms"` // unix ms
	Started   int64  `json:"started_ms"`
	Position  string `json:"position"` // last change-stream id applied
}

// execRecord is an execution shared with the other replicas.
type execRecord struct {
	Execution   attribution.Execution `json:"execution"`
	TokenSHA256 string                `json:"token_sha256"`
	Node        string                `json:"node"`
}

func (r execRecord) tokenKey() ([32]byte, error) {
	var k [32]byte
	b, err := hex.DecodeString(r.TokenSHA256)
	if err != nil || len(b) != 32 {
		return k, errors.New("token_sha256 is not 64 hex digits")
	}
	copy(k[:], b)
	return k, nil
}

func parseExec(data []byte) (execRecord, [32]byte, error) {
	var r execRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return r, [32]byte{}, fmt.Errorf("execution record: %v", err)
	}
	if r.Execution.ID == "" || r.Execution.SessionID == "" || r.Node == "" {
		return r, [32]byte{}, errors.New("execution record: missing id, session or node")
	}
	k, err := r.tokenKey()
	return r, k, err
}

// pendingRecord is a human review waiting for a decision.
type pendingRecord struct {
	Approval approvalsvc.Approval  `json:"approval"`
	Key      approvalsvc.ReviewKey `json:"key"`
	Node     string                `json:"node"`
	Deadline int64                 `json:"deadline_ms"`
}

// Change types on the stream.
const (
	evExecStart = "exec_start" // d: execRecord
	evExecEnd   = "exec_end"   // d: {"id":…}
	evCache     = "cache"      // d: {"key":…, "outcome":…}
	evAmend     = "amend"      // d: {"host":…, "verdict":…, "protocol":…}
	evCreated   = "created"    // d: approvalsvc.Approval
	evDecided   = "decided"    // d: approvalsvc.ClusterDecision
	evExecAmend = "exec_amend" // d: execAmend
)

type cacheChange struct {
	Key     approvalsvc.ReviewKey `json:"key"`
	Outcome string                `json:"outcome"`
	Seq     uint64                `json:"seq"`
}

// cacheValue is a session cache hash value.
type cacheValue struct {
	Outcome string `json:"outcome"`
	Seq     uint64 `json:"seq"`
}

type amendChange struct {
	Host     string `json:"host"`
	Verdict  string `json:"verdict"`
	Protocol string `json:"protocol"`
	Seq      uint64 `json:"seq"`
}

// parseAmend parses one amend record (its MAC already verified) stored
// for host.
func parseAmend(host string, payload []byte) (amendChange, error) {
	var a amendChange
	if err := json.Unmarshal(payload, &a); err != nil {
		return a, fmt.Errorf("amendment: %v", err)
	}
	if a.Host == "" || a.Host != host || (a.Verdict != "allow" && a.Verdict != "deny") {
		return a, fmt.Errorf("amendment for %.60q is not {host, allow|deny, protocol}", host)
	}
	return a, nil
}

// parseCacheValue parses one session cache value (its MAC verified).
func parseCacheValue(payload []byte) (cacheValue, error) {
	var v cacheValue
	if err := json.Unmarshal(payload, &v); err != nil {
		return v, fmt.Errorf("session cache value: %v", err)
	}
	if cacheOutcome(v.Outcome) == "" {
		return v, fmt.Errorf("outcome %.20q is not allow_session, allow_always or deny_always", v.Outcome)
	}
	return v, nil
}

type execEnd struct {
	ID string `json:"id"`
}

// cacheOutcome is what a decision leaves in the session cache ("" none).
func cacheOutcome(outcome string) string {
	switch outcome {
	case approvalsvc.OutcomeAllowSession, approvalsvc.OutcomeAllowAlways, approvalsvc.OutcomeDenyAlways:
		return outcome
	}
	return ""
}

// amendVerdict is the amendment a decision makes ("" none).
func amendVerdict(outcome string) string {
	switch outcome {
	case approvalsvc.OutcomeAllowAlways:
		return "allow"
	case approvalsvc.OutcomeDenyAlways:
		return "deny"
	}
	return ""
}

// ruleProtocol maps a request protocol to the network_rule spelling.
func ruleProtocol(p string) string {
	switch p {
	case "https":
		return "https"
	case "socks5-tcp":
		return "socks5_tcp"
	}
	return "http"
}
