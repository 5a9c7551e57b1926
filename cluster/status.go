package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/netproxy/netproxy/cluster/settings"
)

// NodeStatus is one replica as `netproxy cluster status` shows it.
type NodeStatus struct {
	ID            string        `json:"node"`
	LastHeartbeat time.Time     `json:"last_heartbeat"`
	Age           time.Duration `json:"-"`
	Alive         bool          `json:"alive"`
	Position      string        `json:"position"`
	// Lag is how many changes the replica has not applied yet (capped at
	// 10000) and how old the oldest of them is.
	LagEntries int           `json:"lag_entries"`
	LagTime    time.Duration `json:"-"`
}

// Status is the cluster as stored in Redis.
type Status struct {
	Prefix     string       `json:"key_prefix"`
	Schema     string       `json:"schema"`
	Nodes      []NodeStatus `json:"nodes"`
	Pending    []string     `json:"pending"` // "id host:port session"
	Executions int          `json:"executions"`
	Amendments int          `json:"amendments"`
	StreamEnd  string       `json:"stream_end"`
	// Unverified counts heartbeats and pending records whose MAC does not
	// verify under cluster.key_file (not shown otherwise).
	Unverified int `json:"unverified"`
}

// ReadStatus reads the cluster's state from Redis without joining it.
func ReadStatus(ctx context.Context, s settings.Settings) (Status, error) {
	s = s.WithDefaults()
	key, err := LoadKey(s.KeyFile)
	if err != nil {
		return Status{}, err
	}
	seal := sealer{key}
	uo, err := redisOptions(s)
	if err != nil {
		return Status{}, err
	}
	uo.DialTimeout, uo.ReadTimeout = 2*time.Second, 2*time.Second
	rdb := redis.NewUniversalClient(uo)
	defer rdb.Close()
	k := keys{s.KeyPrefix}
	st := Status{Prefix: s.KeyPrefix}
	if st.Schema, err = rdb.Get(ctx, k.schema()).Result(); err != nil && err != redis.Nil {
		return st, fmt.Errorf("cluster.redis: cannot reach Redis at %s: %v%s", settings.Redact(s.Redis), err, accessHint(err, s))
	}
	if xs, err := rdb.XRevRangeN(ctx, k.events(), "+", "-", 1).Result(); err == nil && len(xs) == 1 {
		st.StreamEnd = xs[0].ID
	}
	nodes, err := rdb.HGetAll(ctx, k.nodes()).Result()
	if err != nil {
		return st, err
	}
	now := time.Now()
	for id, data := range nodes {
		var ni nodeInfo
		payload, err := seal.open(k.nodes(), id, data)
		if err != nil || json.Unmarshal(payload, &ni) != nil {
			st.Unverified++
			continue
		}
		ns := NodeStatus{ID: id, LastHeartbeat: time.UnixMilli(ni.Heartbeat), Position: ni.Position}
		ns.Age = now.Sub(ns.LastHeartbeat)
		ns.Alive = ns.Age <= nodeTTL
		if ni.Position != "" && st.StreamEnd != "" && ni.Position != st.StreamEnd {
			if xs, err := rdb.XRangeN(ctx, k.events(), "("+ni.Position, "+", 10000).Result(); err == nil {
				ns.LagEntries = len(xs)
				if len(xs) > 0 {
					var ms int64
					fmt.Sscanf(xs[0].ID, "%d-", &ms)
					ns.LagTime = now.Sub(time.UnixMilli(ms))
				}
			}
		}
		st.Nodes = append(st.Nodes, ns)
	}
	sort.Slice(st.Nodes, func(i, j int) bool { return st.Nodes[i].ID < st.Nodes[j].ID })
	pend, _ := rdb.HGetAll(ctx, k.pending()).Result()
	for id, data := range pend {
		var p pendingRecord
		payload, err := seal.open(k.pending(), id, data)
		if err != nil || json.Unmarshal(payload, &p) != nil {
			st.Unverified++
			continue
		}
		st.Pending = append(st.Pending, fmt.Sprintf("%s %s:%d session=%s opened_on=%s", id, p.Key.Host, p.Key.Port, p.Key.Session, p.Node))
	}
	sort.Strings(st.Pending)
	st.Executions = int(rdb.HLen(ctx, k.execs()).Val())
	st.Amendments = int(rdb.HLen(ctx, k.amend()).Val())
	return st, nil
}

// Print writes st for a terminal.
func (st Status) Print(w io.Writer) {
	fmt.Fprintf(w, "key prefix %q, schema %q, change stream at %s\n", st.Prefix, st.Schema, orDash(st.StreamEnd))
	fmt.Fprintf(w, "%-28s %-6s %-24s %-10s %s\n", "NODE", "ALIVE", "LAST HEARTBEAT", "AGE", "LAG")
	for _, n := range st.Nodes {
		lag := "0"
		if n.LagEntries > 0 {
			lag = fmt.Sprintf("%d changes (%v)", n.LagEntries, n.LagTime.Round(time.Millisecond))
		}
		alive := "yes"
		if !n.Alive {
			alive = "no"
		}
		fmt.Fprintf(w, "%-28s %-6s %-24s %-10s %s\n", n.ID, alive, n.LastHeartbeat.UTC().Format(time.RFC3339), n.Age.Round(time.Millisecond), lag)
	}
	fmt.Fprintf(w, "executions: %d   amendments: %d   pending reviews: %d\n", st.Executions, st.Amendments, len(st.Pending))
	if st.Unverified > 0 {
		fmt.Fprintf(w, "WARNING: %d records fail verification under cluster.key_file (written by something other than netproxy, or with another key)\n", st.Unverified)
	}
	if len(st.Pending) > 0 {
		fmt.Fprintln(w, "  "+strings.Join(st.Pending, "\n  "))
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
