// Package sandbox runs one command in a Linux sandbox whose only network path
// is netproxy (SPEC §6.4, reference sandbox.md §3).
//
// It owns: the parent side (Run: clone the re-exec init into user, mount, pid,
// net, ipc and uts namespaces, put it in a cgroup of the run's own with pids
// and memory limits, relay the in-sandbox loopback listeners to netproxy
// writing the attribution frame first — a host-side listener only for the
// execution's own process tree — relay a terminal through the init's pty,
// hand host files in as pipes, enforce the timeout, forward signals) and the
// child side (InitMain: read-only root, writable roots, a minimal /dev with a
// new devpts instance, sized private /tmp /run /dev/shm, fresh /proc,
// protected sub-paths including placeholders for missing ones, a new
// anonymous session keyring, capability drop and verification,
// no_new_privs, Landlock, seccomp, then run the command as pid 2 in a new
// session and reap). It also classifies sandbox denials (ClassifyDenial) and
// probes what the host supports (Probe, for `execwrap doctor`).
//
// It must never: pass the attribution token (or any netproxy credential) into
// the sandbox, forward a connection whose frame could not be written, run a
// command with a capability left, or fall back to a weaker tier silently —
// every degradation is reported in Result.Signals and every setup error fails
// closed.
package sandbox
