package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// HostReport is what `execwrap doctor` prints: what this host allows and
// which tier `auto` would use.
type HostReport struct {
	Kernel         string            `json:"kernel"`
	Arch           string            `json:"arch"`
	EUID           int               `json:"euid"`
	Container      string            `json:"container"` // docker, …, or ""
	Sysctls        map[string]string `json:"sysctls"`   // value or "absent"
	LSMs           string            `json:"lsms"`
	LandlockABI    int               `json:"landlock_abi"`
	SeccompFilter  bool              `json:"seccomp_filter"`
	BwrapPath      string            `json:"bwrap_path"`
	NamespacesTier TierProbe         `json:"namespaces_tier"`
	LandlockTier   TierProbe         `json:"landlock_tier"`
	AutoTier       string            `json:"auto_tier"` // namespaces | landlock | unavailable
	// Cgroups says whether each run gets a cgroup (kill, pids and memory
	// limits) on this host, for this user.
	Cgroups CgroupSupport `json:"cgroups"`
}

// TierProbe is the outcome of really running `true` in one tier.
type TierProbe struct {
	OK       bool     `json:"ok"`
	Error    string   `json:"error,omitempty"`
	Signals  []string `json:"signals,omitempty"`
	Duration string   `json:"duration,omitempty"`
}

// Probe inspects the host and runs `true` through each tier, using initPath
// (+initArgs) as the re-exec init.
func Probe(ctx context.Context, initPath string, initArgs []string) HostReport {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	r := HostReport{
		Kernel:      unix.ByteSliceToString(uts.Release[:]),
		Arch:        unix.ByteSliceToString(uts.Machine[:]),
		EUID:        os.Geteuid(),
		Container:   containerKind(),
		Sysctls:     map[string]string{},
		LandlockABI: LandlockABI(),
	}
	for _, k := range []string{
		"/proc/sys/user/max_user_namespaces",
		"/proc/sys/kernel/unprivileged_userns_clone",
		"/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
		"/proc/sys/kernel/unprivileged_bpf_disabled",
		"/proc/sys/kernel/yama/ptrace_scope",
	} {
		name := strings.ReplaceAll(strings.TrimPrefix(k, "/proc/sys/"), "/", ".")
		if b, err := os.ReadFile(k); err == nil {
			r.Sysctls[name] = strings.TrimSpace(string(b))
		} else {
			r.Sysctls[name] = "absent"
		}
	}
	if b, err := os.ReadFile("/sys/kernel/security/lsm"); err == nil {
		r.LSMs = strings.TrimSpace(string(b))
	} else {
		r.LSMs = "unknown (securityfs not mounted)"
	}
	// PR_GET_SECCOMP works everywhere seccomp exists; filter mode support is
	// shown by the kernel exposing Seccomp_filters in status.
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		r.SeccompFilter = strings.Contains(string(b), "Seccomp_filters:")
	}
	if p, err := exec.LookPath("bwrap"); err == nil {
		r.BwrapPath = p
	}
	r.Cgroups = ProbeCgroups()
	r.NamespacesTier = probeTier(ctx, TierNamespaces, initPath, initArgs)
	r.LandlockTier = probeTier(ctx, TierLandlock, initPath, initArgs)
	switch {
	case r.NamespacesTier.OK:
		r.AutoTier = string(TierNamespaces)
	case r.LandlockTier.OK:
		r.AutoTier = string(TierLandlock)
	default:
		r.AutoTier = "unavailable"
	}
	return r
}

func probeTier(ctx context.Context, t Tier, initPath string, initArgs []string) TierProbe {
	dir, err := os.MkdirTemp("", "execwrap-probe-")
	if err != nil {
		return TierProbe{Error: err.Error()}
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := Run(ctx, Spec{
		Argv: []string{"true"}, Cwd: dir, Env: []string{"PATH=/usr/bin:/bin"},
		Kind: KindWorkspaceWrite, Network: NetworkNone, Tier: t,
		InitPath: initPath, InitArgs: initArgs, Timeout: 10 * time.Second,
	})
	return probeOutcome(res, err)
}

// probeOutcome is what running `true` in a probe sandbox says.
func probeOutcome(res Result, err error) TierProbe {
	p := TierProbe{Signals: res.Signals, Duration: res.Duration.Round(time.Microsecond).String()}
	switch {
	case err != nil:
		var ue *usernsError
		if errors.As(err, &ue) {
			p.Error = ue.Error()
		} else {
			p.Error = err.Error()
		}
	case res.ExitCode != 0:
		p.Error = "true exited " + strconv.Itoa(res.ExitCode) + " " + res.Signal
	default:
		p.OK = true
	}
	return p
}

func containerKind() string {
	if _, err := os.Stat("/.dockerenv"); err == nil {
		return "docker"
	}
	if b, err := os.ReadFile("/run/systemd/container"); err == nil {
		return strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/1/environ"); err == nil {
		for kv := range strings.SplitSeq(string(b), "\x00") {
			if v, ok := strings.CutPrefix(kv, "container="); ok {
				return v
			}
		}
	}
	return ""
}
