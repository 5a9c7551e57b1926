package sandbox

import (
	"context"
	"io"
	"net"
	"os"
	"time"
)

// ProbeCapture really builds transparent capture once (SPEC §6.6: `execwrap
// doctor` says whether it works here): `true` in the namespaces tier with
// --network proxied and capture on, so the init adds its routes and
// nftables rules in the sandbox's scratch network namespace and hands its
// sockets over. The "netproxy" is a listener of this process that nothing
// reaches (`true` connects nowhere); no token exists.
func ProbeCapture(ctx context.Context, initPath string, initArgs []string) TierProbe {
	dir, err := os.MkdirTemp("", "execwrap-probe-")
	if err != nil {
		return TierProbe{Error: err.Error()}
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return TierProbe{Error: err.Error()}
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := Run(ctx, Spec{
		Argv: []string{"true"}, Cwd: dir, Env: []string{"PATH=/usr/bin:/bin"},
		Kind: KindReadOnly, Network: NetworkProxied, Tier: TierNamespaces,
		Capture: true, CaptureRequired: true,
		Proxy: &ProxyTarget{HTTPAddr: l.Addr().String(), Token: "doctor-probe",
			WriteFrame: func(io.Writer, string) error { return nil }},
		InitPath: initPath, InitArgs: initArgs, Timeout: 10 * time.Second,
	})
	return probeOutcome(res, err)
}
