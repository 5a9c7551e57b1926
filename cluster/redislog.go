package cluster

// go-redis logs (pool dial failures during a Redis outage, ~5 lines/s)
// through its own unstructured logger; netproxy routes them through its
// slog logger (level warn, log.format honoured, the password replaced,
// at most one line a second with the count of the ones held back).
//
// redis.SetLogger is process-global. That is acceptable here: a process
// runs one netproxy (one serve, one cluster), so there is exactly one
// logger to route to; the last Open wins, which in tests only changes
// where another Cluster's client lines go.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

type redisLog struct {
	log     *slog.Logger
	secrets []string

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func installRedisLog(log *slog.Logger, secrets ...string) {
	var s []string
	for _, x := range secrets {
		if x != "" {
			s = append(s, x)
		}
	}
	redis.SetLogger(&redisLog{log: log, secrets: s})
}

func (r *redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.mu.Lock()
	now := time.Now()
	if now.Sub(r.last) < time.Second {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	held := r.suppressed
	r.last, r.suppressed = now, 0
	r.mu.Unlock()
	msg := fmt.Sprintf(format, v...)
	for _, s := range r.secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	r.log.LogAttrs(ctx, slog.LevelWarn, "redis client", slog.String("message", msg), slog.Int("held_back", held))
}
