package selftest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netproxy/netproxy/sandbox"
)

// HostOptions describe the run the battery will be judged against.
type HostOptions struct {
	Network   string   // proxied | none
	Capture   bool     // transparent capture asked for (SPEC §6.6)
	Workspace string   // the base cwd (writable root under workspace-write)
	Writable  []string // every writable root (HOME inside one is not "outside")
	Home      string   // the caller's home
	// NetproxyHome is $NETPROXY_HOME; Control is the control socket.
	NetproxyHome, Control string
	// Netproxy is netproxy's listening addresses as the host reaches them;
	// NetproxyErr says why they are unknown.
	Netproxy    []string
	NetproxyErr string
	// NetproxySecrets are the paths netproxy reported over the control
	// socket (GET /v1/secret-paths); NetproxySecretsErr says why there
	// are none. DenyRead are the run's --deny-read paths.
	NetproxySecrets    []string
	NetproxySecretsErr string
	DenyRead           []string
	ProbeHost          string
}

// secretPaths are the SPEC §6.5 paths per probe, relative to $HOME
// (except the two of $NETPROXY_HOME).
var secretPaths = map[string]string{
	"fs.secret-ssh":             ".ssh",
	"fs.secret-aws":             ".aws",
	"fs.secret-gcloud":          ".config/gcloud",
	"fs.secret-azure":           ".azure",
	"fs.secret-kube":            ".kube",
	"fs.secret-docker-config":   ".docker/config.json",
	"fs.secret-gnupg":           ".gnupg",
	"fs.secret-netrc":           ".netrc",
	"fs.secret-git-credentials": ".git-credentials",
	"fs.secret-gh":              ".config/gh",
}

// Host is the host side of one selftest: the plan, the listeners that
// catch what gets out, and what it knew before the run.
type Host struct {
	Plan Plan

	mu        sync.Mutex
	hits      map[string][]string // probe → what its listeners received
	closers   []func()
	wg        sync.WaitGroup
	secrets   map[string]secretTruth
	preErr    map[string]string   // probe → why it could not be prepared
	fileCheck map[string][]string // probe → host paths that must not appear
	modeCheck map[string]string   // probe → file whose mode/xattrs the host checks
}

type secretTruth struct {
	hashes map[string]string
	names  map[string]bool
}

// Prepare builds the plan and starts the listeners. Close releases them.
func Prepare(o HostOptions) (*Host, error) {
	nonce := make([]byte, 6)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	h := &Host{
		Plan: Plan{
			Nonce: hex.EncodeToString(nonce), Network: o.Network, Capture: o.Capture, Workspace: o.Workspace,
			Home: o.Home, Targets: map[string][]string{}, Control: o.Control, ProbeHost: o.ProbeHost,
			Secrets: map[string][]SecretTarget{}, Skip: map[string]string{},
		},
		hits: map[string][]string{}, secrets: map[string]secretTruth{}, preErr: map[string]string{},
		fileCheck: map[string][]string{}, modeCheck: map[string]string{},
	}
	p := &h.Plan
	if !o.Capture {
		for _, n := range captureProbes {
			p.Skip[n] = "transparent capture is off (--capture off, or --network is not proxied)"
		}
	}
	v4, v6 := hostAddrs()
	if err := h.network(v4, v6); err != nil {
		h.Close()
		return nil, err
	}
	// netproxy's own listeners.
	p.Netproxy = o.Netproxy
	if len(o.Netproxy) == 0 {
		why := "netproxy's listeners are unknown: " + o.NetproxyErr
		if o.Network == "none" {
			p.Skip["netproxy.direct"] = why + " (network none; host loopback is covered by net.tcp4-loopback)"
		} else {
			h.preErr["netproxy.direct"] = why
			h.preErr["proxy.self-loop"] = why
		}
	}
	if o.Network == "proxied" && o.ProbeHost == "" {
		p.Skip["tls.sni-fronting"] = "give --probe-host HOST:PORT (a name netproxy allows) to probe SNI fronting (SPEC §3.11)"
	}
	// Secrets.
	h.secret("fs.secret-netproxy-home", []string{o.NetproxyHome}, true)
	h.secret("fs.secret-admin-token", []string{filepath.Join(o.NetproxyHome, "admin-token")}, false)
	for name, rel := range secretPaths {
		path := ""
		if o.Home != "" {
			path = filepath.Join(o.Home, rel)
		}
		h.secret(name, []string{path}, false)
	}
	// A folder that holds a writable root is hidden around it (its names
	// stay listable): only the paths that hold none are probed.
	var npSecrets []string
	for _, s := range o.NetproxySecrets {
		if !anyWithin(o.Writable, s) {
			npSecrets = append(npSecrets, s)
		}
	}
	switch {
	case len(npSecrets) > 0:
		h.secret("fs.secret-netproxy-paths", npSecrets, false)
	case o.NetproxySecretsErr != "":
		p.Skip["fs.secret-netproxy-paths"] = "netproxy's secret paths are unknown: " + o.NetproxySecretsErr
	default:
		p.Skip["fs.secret-netproxy-paths"] = "netproxy reported no secret path"
	}
	var denyRead []string
	for _, d := range o.DenyRead {
		if !anyWithin(o.Writable, d) {
			denyRead = append(denyRead, d)
		}
	}
	if len(denyRead) > 0 {
		h.secret("fs.secret-deny-read", denyRead, false)
	} else {
		p.Skip["fs.secret-deny-read"] = "no --deny-read given"
	}
	// Writes outside the writable roots, checked on the host after the run.
	for name, dir := range map[string]string{"fs.write-etc": "/etc", "fs.write-tmp": "/tmp", "fs.write-home": o.Home} {
		switch {
		case dir == "":
			p.Skip[name] = "no HOME"
		case sandbox.UnderAny(dir, o.Writable):
			p.Skip[name] = dir + " is inside a writable root"
		default:
			f := filepath.Join(dir, p.FileName(strings.TrimPrefix(name, "fs.")))
			if _, err := os.Lstat(f); err == nil {
				h.Close()
				return nil, fmt.Errorf("%s already exists: remove it and run selftest again", f)
			}
			h.fileCheck[name] = []string{f}
		}
	}
	if o.Workspace != "" {
		for _, n := range sandbox.DefaultProtectedNames {
			probe := "fs.protected-" + strings.TrimPrefix(n, ".")
			h.fileCheck[probe] = append(h.fileCheck[probe], filepath.Join(o.Workspace, n, p.FileName("plant")))
		}
		h.fileCheck["fs.protected-git-config"] = []string{filepath.Join(o.Workspace, ".git", p.FileName("config"))}
		h.fileCheck["fs.protected-git-hooks"] = []string{filepath.Join(o.Workspace, ".git", "hooks", p.FileName("hook"))}
		scratch := filepath.Join(o.Workspace, p.FileName("scratch"))
		if err := os.Mkdir(scratch, 0o755); err != nil {
			h.Close()
			return nil, fmt.Errorf("scratch folder for the setuid probes: %w", err)
		}
		p.Scratch = scratch
		for _, n := range []string{"fs.setuid", "fs.setgid", "fs.setuid-open", "fs.file-caps"} {
			h.modeCheck[n] = filepath.Join(scratch, p.FileName(strings.TrimPrefix(n, "fs.")))
		}
	}
	return h, nil
}

// network starts one listener per network target.
func (h *Host) network(v4, v6 netip.Addr) error {
	p := &h.Plan
	type tgt struct {
		probe, proto string
		addr         netip.Addr
		why          string // skip reason when addr is invalid
	}
	lo4, lo6 := netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()
	if !canListen(lo6) {
		lo6 = netip.Addr{}
	}
	tgts := []tgt{
		{"net.tcp4-loopback", "tcp", lo4, ""}, {"net.tcp6-loopback", "tcp", lo6, "the host has no IPv6 loopback"},
		{"net.tcp4-host", "tcp", v4, "the host has no non-loopback IPv4 address"},
		{"net.tcp6-host", "tcp", v6, "the host has no global IPv6 address"},
		{"net.udp4-loopback", "udp", lo4, ""}, {"net.udp6-loopback", "udp", lo6, "the host has no IPv6 loopback"},
		{"net.udp4-host", "udp", v4, "the host has no non-loopback IPv4 address"},
		{"net.udp6-host", "udp", v6, "the host has no global IPv6 address"},
		{"net.tfo4", "tcp", lo4, ""}, {"net.tfo4", "tcp", v4, ""},
		{"net.tfo6", "tcp", lo6, "the host has no IPv6 address"}, {"net.tfo6", "tcp", v6, ""},
	}
	for n := range spellings {
		if strings.Contains(n, "127") || strings.Contains(n, "2130706433") || strings.Contains(n, "0x7f") {
			tgts = append(tgts, tgt{n, "tcp", lo4, ""})
		}
	}
	for _, t := range tgts {
		if !t.addr.IsValid() {
			if t.why != "" && len(p.Targets[t.probe]) == 0 {
				p.Skip[t.probe] = t.why
			}
			continue
		}
		delete(p.Skip, t.probe)
		addr, err := h.listen(t.probe, t.proto, t.addr)
		if err != nil {
			return fmt.Errorf("%s: listen on %s: %w", t.probe, t.addr, err)
		}
		p.Targets[t.probe] = append(p.Targets[t.probe], addr)
	}
	return nil
}

func canListen(a netip.Addr) bool {
	l, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// listen starts a TCP or UDP listener that records what reaches it for
// probe (and answers a datagram, as a resolver would).
func (h *Host) listen(probe, proto string, a netip.Addr) (string, error) {
	ap := netip.AddrPortFrom(a, 0).String()
	record := func(s string) {
		h.mu.Lock()
		h.hits[probe] = append(h.hits[probe], s)
		h.mu.Unlock()
	}
	if proto == "udp" {
		pc, err := net.ListenPacket("udp", ap)
		if err != nil {
			return "", err
		}
		h.closers = append(h.closers, func() { pc.Close() })
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			buf := make([]byte, 1500)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				record(fmt.Sprintf("a %d-byte datagram from %s on %s", n, from, pc.LocalAddr()))
				if n >= 3 {
					buf[2] |= 0x80 // QR: an answer, so the sender sees the path works
					pc.WriteTo(buf[:n], from)
				}
			}
		}()
		return pc.LocalAddr().String(), nil
	}
	l, err := net.Listen("tcp", ap)
	if err != nil {
		return "", err
	}
	h.closers = append(h.closers, func() { l.Close() })
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			b := make([]byte, 128)
			n, _ := c.Read(b)
			c.Close()
			record(fmt.Sprintf("a connection from %s on %s (first bytes %q)", c.RemoteAddr(), l.Addr(), b[:n]))
		}
	}()
	return l.Addr().String(), nil
}

// secret records the host secrets at paths that the caller can read, or
// skips the probe when there are none. A socket, a FIFO or a device is not
// read (it has no bytes to compare).
func (h *Host) secret(probe string, paths []string, dirOnly bool) {
	p := &h.Plan
	truth := secretTruth{hashes: map[string]string{}, names: map[string]bool{}}
	var targets []SecretTarget
	var why []string
	for _, path := range paths {
		if path == "" {
			why = append(why, "no HOME")
			continue
		}
		fi, err := os.Stat(path)
		if err != nil {
			why = append(why, "nothing at "+path+" on this host")
			continue
		}
		st := SecretTarget{Path: path, Dir: fi.IsDir()}
		switch {
		case !fi.IsDir() && dirOnly:
			why = append(why, path+" is not a folder")
			continue
		case fi.Mode().IsRegular():
			if sum, ok := hashFile(path); ok {
				truth.hashes[path] = sum
			}
		case fi.IsDir():
			if ents, err := os.ReadDir(path); err == nil {
				for _, e := range ents {
					truth.names[e.Name()] = true
				}
			}
			// Up to 32 readable regular files, three levels deep.
			filepath.WalkDir(path, func(f string, d fs.DirEntry, err error) error {
				if err != nil || len(st.Files) >= 32 {
					return filepath.SkipDir
				}
				if d.IsDir() && strings.Count(strings.TrimPrefix(f, path), "/") >= 3 {
					return filepath.SkipDir
				}
				if d.Type().IsRegular() {
					if sum, ok := hashFile(f); ok {
						truth.hashes[f] = sum
						st.Files = append(st.Files, f)
					}
				}
				return nil
			})
		default:
			continue
		}
		targets = append(targets, st)
	}
	if len(truth.hashes) == 0 && len(truth.names) == 0 {
		if len(why) == 0 {
			why = []string{strings.Join(paths, ", ") + " has nothing you can read on the host either"}
		}
		p.Skip[probe] = strings.Join(why, "; ")
		return
	}
	p.Secrets[probe] = targets
	h.secrets[probe] = truth
}

// anyWithin reports whether some path of ps is root or below it.
func anyWithin(ps []string, root string) bool {
	for _, p := range ps {
		if sandbox.UnderAny(p, []string{root}) {
			return true
		}
	}
	return false
}

func hashFile(p string) (string, bool) {
	b, err := readLimited(p)
	if err != nil || len(b) == 0 {
		return "", false
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]), true
}

// Judge merges the sandbox's results with what the host saw, removes what
// the probes left behind, and closes the listeners.
func (h *Host) Judge(got []Result) []Result {
	// Let in-flight connections be recorded before the listeners close.
	time.Sleep(200 * time.Millisecond)
	h.stopListeners()
	defer h.Close() // the scratch folder, once its files are judged
	out := make([]Result, 0, len(got))
	for _, r := range got {
		if why := h.preErr[r.Name]; why != "" && r.Result != Escaped {
			r = Result{Name: r.Name, Result: Error, Evidence: why}
		}
		r = Merge(r, h.hostEscape(r), "")
		out = append(out, r)
	}
	return out
}

// hostEscape is what the host saw of probe r getting out ("" for nothing).
func (h *Host) hostEscape(r Result) string {
	h.mu.Lock()
	hits := h.hits[r.Name]
	h.mu.Unlock()
	var ev []string
	if len(hits) > 0 {
		ev = append(ev, fmt.Sprintf("%d arrival(s): %s", len(hits), strings.Join(hits, "; ")))
	}
	if t, ok := h.secrets[r.Name]; ok {
		for _, f := range sortedKeys(r.Hashes) {
			if t.hashes[f] != "" && t.hashes[f] == r.Hashes[f] {
				ev = append(ev, "read the host's bytes of "+f)
			}
		}
		var listed []string
		for _, n := range r.Names {
			if t.names[n] {
				listed = append(listed, n)
			}
		}
		if len(listed) > 0 {
			ev = append(ev, "listed the host's "+strings.Join(listed, ", "))
		}
	}
	for _, f := range h.fileCheck[r.Name] {
		if _, err := os.Lstat(f); err == nil {
			ev = append(ev, f+" exists on the host (removed)")
			os.Remove(f)
		}
	}
	if f := h.modeCheck[r.Name]; f != "" {
		if fi, err := os.Lstat(f); err == nil {
			if m := fi.Mode(); m&(os.ModeSetuid|os.ModeSetgid) != 0 {
				ev = append(ev, fmt.Sprintf("%s is %s on the host", f, m))
			}
			if n, err := unix.Lgetxattr(f, "security.capability", nil); err == nil && n > 0 {
				ev = append(ev, f+" carries security.capability on the host")
			}
			os.Remove(f)
		}
	}
	return strings.Join(ev, "; ")
}

// Close stops the listeners and removes the scratch folder (idempotent).
func (h *Host) Close() {
	h.stopListeners()
	if h.Plan.Scratch != "" {
		os.RemoveAll(h.Plan.Scratch)
	}
}

func (h *Host) stopListeners() {
	h.mu.Lock()
	cs := h.closers
	h.closers = nil
	h.mu.Unlock()
	for _, c := range cs {
		c()
	}
	h.wg.Wait()
}

// hostAddrs returns the first non-loopback IPv4 address and the first
// global IPv6 address of this host's interfaces (invalid when none).
func hostAddrs() (v4, v6 netip.Addr) {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		pfx, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := pfx.Addr()
		switch {
		case ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsMulticast():
		case ip.Is4() && !v4.IsValid():
			v4 = ip
		case ip.Is6() && ip.IsGlobalUnicast() && !v6.IsValid():
			v6 = ip
		}
	}
	return v4, v6
}

// NetproxyAddrs turns netproxy's bound addresses into addresses to dial: a
// wildcard bind counts as loopback and the host's own addresses.
func NetproxyAddrs(bound []netip.AddrPort) []string {
	v4, v6 := hostAddrs()
	seen := map[string]bool{}
	var out []string
	add := func(a netip.Addr, port uint16) {
		if !a.IsValid() {
			return
		}
		s := netip.AddrPortFrom(a, port).String()
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, b := range bound {
		switch {
		case b.Addr().Unmap() == netip.IPv4Unspecified():
			add(netip.MustParseAddr("127.0.0.1"), b.Port())
			add(v4, b.Port())
		case b.Addr() == netip.IPv6Unspecified():
			add(netip.IPv6Loopback(), b.Port())
			add(v6, b.Port())
			add(netip.MustParseAddr("127.0.0.1"), b.Port())
		default:
			add(b.Addr().Unmap(), b.Port())
		}
	}
	return out
}
