package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/netproxy/netproxy/attribution"
	"github.com/netproxy/netproxy/sandbox"
	"github.com/netproxy/netproxy/sandbox/netctl"
)

func TestWorkspaceRoots(t *testing.T) {
	for _, c := range []struct {
		kind      sandbox.Kind
		cwd, base string
		extra     []string
		wantKind  sandbox.Kind
		want      []string
	}{
		{sandbox.KindWorkspaceWrite, "/w", "/w", []string{"/x"}, sandbox.KindWorkspaceWrite, []string{"/x"}},
		{sandbox.KindWorkspaceWrite, "/w/", "/w", nil, sandbox.KindWorkspaceWrite, nil},
		{sandbox.KindWorkspaceWrite, "/w/sub", "/w", nil, sandbox.KindReadOnly, []string{"/w"}},
		{sandbox.KindWorkspaceWrite, "/usr/local/bin", "/w", []string{"/x"}, sandbox.KindReadOnly, []string{"/w", "/x"}},
		{sandbox.KindReadOnly, "/usr/local/bin", "/w", nil, sandbox.KindReadOnly, nil},
		{sandbox.KindDangerFullAccess, "/elsewhere", "/w", nil, sandbox.KindDangerFullAccess, nil},
	} {
		k, roots := WorkspaceRoots(c.kind, c.cwd, c.base, c.extra)
		if k != c.wantKind || !reflect.DeepEqual(roots, c.want) {
			t.Errorf("%s cwd %s base %s: (%s, %q), want (%s, %q)", c.kind, c.cwd, c.base, k, roots, c.wantKind, c.want)
		}
	}
}

func TestEscalatedKind(t *testing.T) {
	for _, c := range []struct {
		kind      sandbox.Kind
		network   sandbox.NetworkMode
		sandboxed bool
		want      sandbox.Kind
		kept      bool
	}{
		{sandbox.KindWorkspaceWrite, sandbox.NetworkProxied, true, sandbox.KindWorkspaceWrite, false},
		{sandbox.KindWorkspaceWrite, sandbox.NetworkProxied, false, sandbox.KindDangerFullAccess, false},
		{sandbox.KindReadOnly, sandbox.NetworkNone, false, sandbox.KindReadOnly, true},
		{sandbox.KindReadOnly, sandbox.NetworkNone, true, sandbox.KindReadOnly, false},
		{sandbox.KindDangerFullAccess, sandbox.NetworkHost, false, sandbox.KindDangerFullAccess, false},
		{sandbox.KindExternal, sandbox.NetworkProxied, false, sandbox.KindExternal, false},
	} {
		k, kept := escalatedKind(c.kind, c.network, c.sandboxed)
		if k != c.want || kept != c.kept {
			t.Errorf("%s %s sandboxed=%v: (%s, %v), want (%s, %v)", c.kind, c.network, c.sandboxed, k, kept, c.want, c.kept)
		}
	}
}

// fakeControl stands in for netproxy's control socket.
type fakeControl struct {
	mu           sync.Mutex
	reg          netctl.Registration
	registerErr  error
	eventsErr    error
	events       chan attribution.Event
	secrets      []string
	secretsErr   error
	unregistered []string
}

func (f *fakeControl) Register(context.Context, attribution.ExecutionSpec) (netctl.Registration, error) {
	return f.reg, f.registerErr
}

func (f *fakeControl) Events(context.Context, string) (<-chan attribution.Event, error) {
	return f.events, f.eventsErr
}

func (f *fakeControl) Unregister(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unregistered = append(f.unregistered, id)
	return nil
}

func (f *fakeControl) SecretPaths(context.Context) ([]string, error) { return f.secrets, f.secretsErr }

func TestNetSession(t *testing.T) {
	reg := netctl.Registration{ExecutionID: "e1", Token: "tok", HTTPProxy: "127.0.0.1:1", NetworkNotes: []string{"narrower"}}
	t.Run("events", func(t *testing.T) {
		fc := &fakeControl{reg: reg, events: make(chan attribution.Event, 8)}
		var notes bytes.Buffer
		a := &Attempter{Control: fc, Notes: &notes}
		var spec sandbox.Spec
		n := a.startNetwork(context.Background(), context.Background(), &spec)
		if !strings.Contains(notes.String(), "execwrap run: note: narrower") {
			t.Errorf("notes %q", notes.String())
		}
		p, err := spec.ProxyResolve(context.Background())
		if err != nil || p.Token != "tok" || p.HTTPAddr != reg.HTTPProxy {
			t.Fatalf("resolve: %+v %v", p, err)
		}
		deny := attribution.Event{Type: attribution.EventNetworkDecision, Host: "evil.test", Port: 443, Decision: "deny"}
		fc.events <- deny
		fc.events <- deny // the same denial counts once
		fc.events <- attribution.Event{Type: attribution.EventNetworkDecision, Host: "ok.test", Decision: "allow"}
		fc.events <- attribution.Event{Type: attribution.EventDeniedByUser}
		close(fc.events)
		<-spec.Stop // denied_by_user stops the command
		if id := n.finish(true); id != "e1" || !reflect.DeepEqual(fc.unregistered, []string{"e1"}) {
			t.Fatalf("finish: %q, unregistered %q", id, fc.unregistered)
		}
		ds, byUser := n.outcome()
		if !byUser || len(ds) != 1 || ds[0].Host != "evil.test" {
			t.Fatalf("denials %+v byUser %v", ds, byUser)
		}
	})
	t.Run("unused registration is undone", func(t *testing.T) {
		fc := &fakeControl{reg: reg, events: make(chan attribution.Event)}
		a := &Attempter{Control: fc, Notes: &bytes.Buffer{}}
		var spec sandbox.Spec
		n := a.startNetwork(context.Background(), context.Background(), &spec)
		if id := n.finish(true); id != "e1" || len(fc.unregistered) != 1 {
			t.Fatalf("finish: %q, unregistered %q", id, fc.unregistered)
		}
	})
	t.Run("failed event stream", func(t *testing.T) {
		fc := &fakeControl{reg: reg, eventsErr: errors.New("gone")}
		a := &Attempter{Control: fc, Notes: &bytes.Buffer{}}
		var spec sandbox.Spec
		n := a.startNetwork(context.Background(), context.Background(), &spec)
		if _, err := spec.ProxyResolve(context.Background()); err == nil || !strings.Contains(err.Error(), "--network proxied: event stream: gone") {
			t.Fatalf("resolve: %v", err)
		}
		if !reflect.DeepEqual(fc.unregistered, []string{"e1"}) || n.finish(true) != "" {
			t.Fatalf("unregistered %q", fc.unregistered)
		}
	})
}

func TestStartHiddenPaths(t *testing.T) {
	own := []string{"/home/u/.ssh"}
	for _, c := range []struct {
		name    string
		secrets []string
		err     error
		want    []string
		wantErr bool
	}{
		{name: "netproxy's and own", secrets: []string{"/etc/np/key"}, want: []string{"/home/u/.ssh", "/etc/np/key"}},
		{name: "netproxy not running", err: netctl.ErrUnreachable, want: own},
		{name: "netproxy failed: fail closed", err: errors.New("500"), wantErr: true},
	} {
		a := &Attempter{Control: &fakeControl{secrets: c.secrets, secretsErr: c.err}, OwnHidden: own}
		got, err := a.startHiddenPaths(context.Background())()
		if (err != nil) != c.wantErr || !c.wantErr && !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %q %v, want %q (error %v)", c.name, got, err, c.want, c.wantErr)
		}
	}
}
