package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"
)

// Kind is the sandbox kind of SPEC §7.6 (--sandbox).
type Kind string

const (
	KindReadOnly         Kind = "read-only"
	KindWorkspaceWrite   Kind = "workspace-write"
	KindDangerFullAccess Kind = "danger-full-access"
	// KindExternal means an outer sandbox is assumed: execwrap adds none.
	KindExternal Kind = "external"
)

// ParseKind validates a --sandbox value.
func ParseKind(s string) (Kind, error) {
	switch k := Kind(s); k {
	case KindReadOnly, KindWorkspaceWrite, KindDangerFullAccess, KindExternal:
		return k, nil
	}
	return "", fmt.Errorf("--sandbox %q: want read-only, workspace-write, danger-full-access or external", s)
}

// Confining reports whether the kind makes execwrap build a sandbox.
func (k Kind) Confining() bool { return k == KindReadOnly || k == KindWorkspaceWrite }

// NetworkMode is the --network value.
type NetworkMode string

const (
	// NetworkNone is an empty network namespace (only lo).
	NetworkNone NetworkMode = "none"
	// NetworkProxied reaches the outside only through netproxy.
	NetworkProxied NetworkMode = "proxied"
	// NetworkHost shares the host network; only with danger-full-access.
	NetworkHost NetworkMode = "host"
)

// ParseNetworkMode validates a --network value.
func ParseNetworkMode(s string) (NetworkMode, error) {
	switch m := NetworkMode(s); m {
	case NetworkNone, NetworkProxied, NetworkHost:
		return m, nil
	}
	return "", fmt.Errorf("--network %q: want proxied, none or host", s)
}

// Tier is the enforcement tier actually used (reference sandbox.md §3.5).
type Tier string

const (
	// TierNamespaces is the full tier: user+mount+pid+net+ipc+uts namespaces,
	// mounts, caps, Landlock and seccomp.
	TierNamespaces Tier = "namespaces"
	// TierLandlock is the degraded tier for hosts without user namespaces:
	// Landlock (ABI ≥ 4) + seccomp, no namespaces.
	TierLandlock Tier = "landlock"
	// TierNone means no sandbox (danger-full-access, external, or an approved
	// escalation).
	TierNone Tier = "none"
	// TierAuto picks namespaces, then landlock, else fails closed.
	TierAuto Tier = "auto"
)

// DefaultProtectedNames are the sub-paths of every writable root that stay
// read-only under workspace-write (repository metadata and tool state whose
// modification would run code outside the sandbox later).
var DefaultProtectedNames = []string{".git", ".hg", ".svn", ".codex", ".execwrap", ".netproxy"}

// ProxyTarget says where the bridge sends in-sandbox connections and how it
// attributes them. The Token stays in this process; it is never sent to the
// init.
type ProxyTarget struct {
	HTTPAddr   string // netproxy HTTP listener, host:port
	SOCKS5Addr string // netproxy SOCKS5 listener, host:port ("" → none)
	Token      string
	// WriteFrame writes the attribution frame (attribution.WriteFrame).
	WriteFrame func(w io.Writer, token string) error
	// Dial dials netproxy from the host network namespace; nil → net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Spec is one sandboxed execution.
type Spec struct {
	Argv []string
	Cwd  string   // absolute; must exist
	Env  []string // the command's environment (proxy variables are added here)

	Kind          Kind
	Network       NetworkMode
	Tier          TierChoice
	WritableRoots []string // extra writable roots (--writable-root), absolute
	// ProtectedNames overrides DefaultProtectedNames when non-nil.
	ProtectedNames []string
	// HiddenPaths (absolute) are never readable inside (SPEC §6.5):
	// netproxy's secret paths, $NETPROXY_HOME and the deny-read list.
	// Symlinks are followed on the host; absent paths need nothing.
	HiddenPaths []string

	// Proxy is required for NetworkProxied unless ProxyResolve is set.
	Proxy *ProxyTarget
	// ProxyResolve, when set, supplies the target lazily: the namespaces
	// tier calls it only when the in-sandbox listeners arrive, so the
	// caller can register the execution with netproxy while the sandbox is
	// being built. The command starts only after it returned. Both an HTTP
	// and a SOCKS5 listener are then created inside the sandbox.
	ProxyResolve func(ctx context.Context) (*ProxyTarget, error)

	// Capture turns on transparent capture (SPEC §6.6) in the namespaces
	// tier with NetworkProxied: programs that ignore the proxy variables
	// reach the network through netproxy too. Ignored elsewhere (the
	// landlock tier has no network namespace: the run goes on without
	// capture and says so in Result.Signals, unless CaptureRequired, which
	// fails it instead).
	Capture, CaptureRequired bool

	// Files are created in the sandbox's private temporary folder before
	// the command starts (their variables point at them).
	Files []File

	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Timeout        time.Duration // 0 → none
	// Limits bounds memory, processes (a cgroup of the run's own, where
	// the host lets execwrap create one) and the private tmpfs mounts.
	Limits Limits
	// AllowDegraded lets a root caller run the namespaces tier without
	// Landlock (otherwise that fails closed).
	AllowDegraded bool

	// InitPath is the binary re-executed as the init (normally
	// /proc/self/exe); InitArgs follow it (normally ["__sandbox-init"]).
	InitPath string
	InitArgs []string
	// Signals, when non-nil, receives signals to forward to the command.
	Signals <-chan Signal
	// Stop, when it closes, kills the command (e.g. netproxy reported
	// denied_by_user); the Result then has Stopped set.
	Stop <-chan struct{}
}

// TierChoice is what the caller asks for: TierAuto, or one exact tier.
type TierChoice = Tier

// Signal is a signal number to forward (kept as int so the type is portable).
type Signal int

// Result is what happened to one attempt.
type Result struct {
	ExitCode    int
	Signal      string // e.g. "SIGKILL" when the command died by a signal
	TimedOut    bool
	Stopped     bool // killed because Spec.Stop closed
	Tier        Tier
	Duration    time.Duration
	LandlockABI int
	// Signals lists setup notes and degradations (proc_fallback,
	// landlock_unavailable, protected_missing:.git, …): never secrets.
	Signals []string
}
