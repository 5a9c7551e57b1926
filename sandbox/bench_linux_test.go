package sandbox

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/netproxy/netproxy/attribution"
)

func benchRun(b *testing.B, s Spec) {
	s.Argv, s.Kind, s.Tier, s.Timeout = []string{"/bin/true"}, KindWorkspaceWrite, TierNamespaces, 10*time.Second
	s.Cwd = b.TempDir()
	s.Env = []string{"PATH=/usr/bin:/bin"}
	s.Stdout, s.Stderr = io.Discard, io.Discard
	b.ResetTimer()
	for range b.N {
		res, err := Run(context.Background(), s)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%v %+v", err, res)
		}
	}
}

// BenchmarkRunTrueNone: the namespaces tier, empty network, /bin/true.
func BenchmarkRunTrueNone(b *testing.B) { benchRun(b, Spec{Network: NetworkNone}) }

// BenchmarkRunTrueProxied adds the in-sandbox listeners and their fd
// handoff to the bridge (no connection is made).
func BenchmarkRunTrueProxied(b *testing.B) {
	p := startFramingProxy(b)
	benchRun(b, Spec{Network: NetworkProxied, Proxy: &ProxyTarget{HTTPAddr: p.ln.Addr().String(), SOCKS5Addr: p.ln.Addr().String(),
		Token: "bench-token", WriteFrame: attribution.WriteFrame}})
}
