package proxy

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/internal/observe"
)

// What an idle tunnel keeps on the heap (docs/BENCHMARKS.md "KiB per idle
// CONNECT tunnel"). Every feature a tunnel can carry is on: the access
// record (a connection_end sink), the TLS-name check (check_tls_name), the
// parker. Only allocations made by the proxy's own code are counted (the
// test's client and upstream sockets are not the proxy's).

// idleTunnelBudget is the most heap an idle tunnel may hold, in bytes: its
// Conn, the two sockets' netFDs and addresses (≈ 650 bytes of the net
// package's), the Tunnel, its access record, its TLS-name report and its
// flow, with the parker's two map entries. 1 330 measured with Go 1.26
// (1 710 before the records were made compact).
const idleTunnelBudget = 1400

var idleTunnelPolicy = strings.Replace(testPolicy, "[network]\n", "[network]\ncheck_tls_name = true\n", 1)

type discardEnds struct{}

func (discardEnds) ConnectionEnd(observe.ConnectionEndEvent) {}

// holdServer accepts connections and keeps them open, sending nothing.
func holdServer(t testing.TB) (port int, count func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().(*net.TCPAddr).Port, func() int { mu.Lock(); defer mu.Unlock(); return len(held) }
}

// openIdleTunnel opens a CONNECT or SOCKS5 tunnel to up.test:port.
func openIdleTunnel(t testing.TB, s *stack, kind string, port int) net.Conn {
	t.Helper()
	addr := s.httpAddr
	if kind == "socks5" {
		addr = s.socksAddr
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if kind == "socks5" {
		const host = "up.test"
		msg := []byte{0x05, 0x01, 0x00, 0x05, 0x01, 0x00, 0x03, byte(len(host))}
		msg = append(msg, host...)
		msg = append(msg, byte(port>>8), byte(port))
		c.Write(msg)
		var rep [12]byte
		if _, err := io.ReadFull(c, rep[:]); err != nil || rep[3] != 0 {
			t.Fatalf("SOCKS5 CONNECT: % x %v", rep, err)
		}
	} else {
		fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n", port, port)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
	}
	c.SetDeadline(time.Time{})
	return c
}

// proxyInuse sums the in-use heap bytes allocated with the proxy's own
// (non-test) code on the stack, as of the last completed GC.
func proxyInuse() int64 {
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+50)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	var total int64
	for _, r := range recs {
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			if strings.Contains(f.Function, "/internal/proxy.") && !strings.HasSuffix(f.File, "_test.go") {
				total += r.InUseBytes()
				break
			}
			if !more {
				break
			}
		}
	}
	return total
}

// TestIdleTunnelHeap holds N idle CONNECT and SOCKS5 tunnels, parked, and
// charges the proxy's heap growth to them. NETPROXY_TUNNEL_HEAP=file
// writes the heap profile with the tunnels open.
func TestIdleTunnelHeap(t *testing.T) {
	for _, kind := range []string{"connect", "socks5"} {
		t.Run(kind, func(t *testing.T) {
			per := idleTunnelHeap(t, kind, 200, os.Getenv("NETPROXY_TUNNEL_HEAP"))
			t.Logf("%s: %.0f heap bytes per idle tunnel", kind, per)
			if per > idleTunnelBudget {
				t.Errorf("%s: an idle tunnel holds %.0f heap bytes, want at most %d", kind, per, idleTunnelBudget)
			}
		})
	}
}

// BenchmarkIdleTunnelHeap reports the heap an idle CONNECT tunnel holds
// (heapB/tunnel) over 100 tunnels per iteration
// (NETPROXY_TUNNEL_KIND=socks5: a SOCKS5 tunnel).
func BenchmarkIdleTunnelHeap(b *testing.B) {
	var per float64
	for i := 0; i < b.N; i++ {
		per = idleTunnelHeap(b, cmp.Or(os.Getenv("NETPROXY_TUNNEL_KIND"), "connect"), 100, "")
	}
	b.ReportMetric(per, "heapB/tunnel")
}

// idleTunnelHeap opens n idle tunnels of kind through a fresh stack with
// every tunnel feature on and returns the proxy's heap growth per tunnel;
// profile, when set, names the heap profile to write with them open.
func idleTunnelHeap(t testing.TB, kind string, n int, profile string) float64 {
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 1
	port, held := holdServer(t)
	s := newStackWith(t, idleTunnelPolicy, Limits{IdleTimeout: time.Hour}, stackParts{ends: discardEnds{}, maxConns: 2 * n})
	// Warm lazily made state (pools, the parker's map) first.
	const warm = 8
	clients := make([]net.Conn, 0, n+warm)
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for i := 0; i < warm; i++ {
		clients = append(clients, openIdleTunnel(t, s, kind, port))
	}
	waitParked(t, s.core.Parker, 2*warm)
	before := proxyInuse()
	for i := 0; i < n; i++ {
		clients = append(clients, openIdleTunnel(t, s, kind, port))
	}
	waitParked(t, s.core.Parker, 2*(n+warm))
	for deadline := time.Now().Add(5 * time.Second); held() < n+warm && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if held() < n+warm {
		t.Fatalf("%d upstream connections for %d tunnels", held(), n+warm)
	}
	per := float64(proxyInuse()-before) / float64(n)
	if profile != "" {
		f, err := os.Create(profile + "." + kind)
		if err != nil {
			t.Fatal(err)
		}
		pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
	}
	return per
}

// TestSNIReportKeepsEveryField: the sni_mismatch decision rebuilt from a
// tunnel's compact sniReport is the allowed decision's, blocked, whichever field of
// hostpolicy.Decision is set (a field added later that sniReport neither
// keeps nor checks fails here).
func TestSNIReportKeepsEveryField(t *testing.T) {
	core := &Core{}
	typ := reflect.TypeOf(hostpolicy.Decision{})
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		d := hostpolicy.Decision{Verdict: hostpolicy.Allow, Host: "up.test", Port: 443, CheckTLSName: true}
		v := reflect.ValueOf(&d).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int, reflect.Int64:
			v.SetInt(v.Int() + 1)
		case reflect.Uint16:
			v.SetUint(v.Uint() + 1)
		case reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
		default:
			t.Fatalf("Decision.%s: kind %s not covered by this test", f.Name, v.Kind())
		}
		if !d.CheckTLSName || d.Intercept {
			continue // no check: nothing to report
		}
		name, r := core.tlsNameCheck(&d)
		if name != d.Host || r == nil {
			t.Fatalf("Decision.%s set: tlsNameCheck = %q, %v", f.Name, name, r)
		}
		// What the closure over the whole decision reported before.
		want := d
		want.Verdict, want.Reason, want.Source = hostpolicy.Deny, hostpolicy.ReasonSNIMismatch, hostpolicy.SourceBaseline
		want.CheckTLSName = false
		if got := r.blocked(name); !reflect.DeepEqual(got, want) {
			t.Errorf("Decision.%s set: reported %+v, want %+v", f.Name, got, want)
		}
	}
}
