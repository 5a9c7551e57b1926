package cluster

import (
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"
)

// FuzzApplyChange feeds arbitrary stream entries to a replica: whatever
// Redis holds, applying it must not panic, and an entry that does not
// verify or parse changes nothing.
func FuzzApplyChange(f *testing.F) {
	f.Add("exec_start", "n", `{"execution":{"execution_id":"e","session_id":"s"},"token_sha256":"00","node":"x"}`)
	f.Add("cache", "n", `{"key":{"session":"s","host":"h"},"outcome":"allow_session"}`)
	f.Add("amend", "n", `{"host":"h","verdict":"allow","protocol":"https"}`)
	f.Add("decided", "n", `{"id":"a","outcome":"deny"}`)
	f.Add("exec_end", "n", `{"id":"e"}`)
	f.Fuzz(func(t *testing.T, typ, node, data string) {
		c := &Cluster{node: "self", log: slog.New(slog.DiscardHandler), m: newMetrics(nil), seal: sealer{[]byte("k")}, replay: newReplayGuard(),
			adopted: map[string]string{}, ending: map[string]bool{}, waiters: map[string][]chanDecision{}}
		c.applyChange(redis.XMessage{ID: "1-0", Values: map[string]any{"t": typ, "n": node, "d": data}})
		parseExec([]byte(data))
		parseReviewField("s", data)
		parseAmend(node, []byte(data))
		parseCacheValue([]byte(data))
	})
}
