// Package sandbox runs one command in a Linux sandbox whose only network path
// is netproxy (SPEC §6.4, reference sandbox.md §3).
//
// It owns: the parent side (Run: clone the re-exec init into user, mount, pid,
// net, ipc and uts namespaces, relay the in-sandbox loopback listeners to
// netproxy writing the attribution frame first, enforce the timeout, forward
// signals) and the child side (InitMain: read-only root, writable roots,
// private /tmp /run /dev/shm, fresh /proc, protected sub-paths, capability
// drop and verification, no_new_privs, Landlock, seccomp, then run the command
// as pid 2 and reap). It also classifies sandbox denials (ClassifyDenial) and
// probes what the host supports (Probe, for `execwrap doctor`).
//
// It must never: pass the attribution token (or any netproxy credential) into
// the sandbox, forward a connection whose frame could not be written, run a
// command with a capability left, or fall back to a weaker tier silently —
// every degradation is reported in Result.Signals and every setup error fails
// closed.
package sandbox
