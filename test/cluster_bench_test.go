package test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkClusterRequest is a whole keep-alive request through a real
// replica, cluster mode off and on: an allow-list hit (the baseline
// decides; the approval service is never asked) and an allow_session hit
// (the session cache decides). Cluster mode adds no Redis round trip to
// either; the numbers are for docs/BENCHMARKS.md.
func BenchmarkClusterRequest(b *testing.B) {
	up := StartUpstream(b, false)
	rds := StartRedis(b)
	single := StdConfig()
	single.Approvals = true
	single.Hosts["alpha.test"] = []string{"127.0.0.1"}
	clustered := single
	clustered.Extra = fmt.Sprintf("[cluster]\nredis = %q\nnode_id = \"bench\"\nkey_file = %q\n", rds.URL(), ClusterKeyFile(b))
	for _, mode := range []struct {
		name string
		cfg  ProxyConfig
	}{{"single", single}, {"cluster", clustered}} {
		p := StartProxy(b, mode.cfg)
		c := p.HTTPClient(true)
		// allow_session for alpha.test in the default session.
		done := make(chan int, 1)
		go func() {
			resp, err := c.Get(up.URL("alpha.test", "/hello"))
			if err != nil {
				done <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		var id string
		for id == "" {
			_, body := p.AdminRequest(b, "GET", "/api/approvals?status=pending", p.Token)
			if i := strings.Index(body, `"id":"`); i >= 0 {
				id = body[i+6 : i+6+len("apv_")+24]
			}
		}
		req, _ := http.NewRequest("POST", "http://"+p.Admin+"/api/approvals/"+id+"/decision", strings.NewReader(`{"decision":"allow_session"}`))
		req.Header.Set("Authorization", "Bearer "+p.Token)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
			b.Fatalf("decide: %v", err)
		}
		if <-done != 200 {
			b.Fatal("setup request not allowed")
		}
		for _, target := range []struct{ name, host string }{{"allowlist", "up.test"}, {"session-cache", "alpha.test"}} {
			b.Run(mode.name+"/"+target.name, func(b *testing.B) {
				u := up.URL(target.host, "/hello")
				for i := 0; i < b.N; i++ {
					resp, err := c.Get(u)
					if err != nil || resp.StatusCode != 200 {
						b.Fatalf("%v %v", err, resp)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
}

// BenchmarkClusterRegistration is POST /v1/executions on a real replica
// over its control socket, Redis plain and over TLS (rediss://, CA and
// client certificate): the registration stores the execution in Redis
// before it answers, so this is what TLS adds to each one. p50 and p99 of
// the POST are reported for docs/BENCHMARKS.md.
func BenchmarkClusterRegistration(b *testing.B) {
	pki := newTestPKI(b)
	plain := StartRedis(b)
	secure := StartRedisWith(b, &Redis{TLS: pki.clientTLS(b), Args: []string{"--tls-cert-file", pki.ServerCert,
		"--tls-key-file", pki.ServerKey, "--tls-ca-cert-file", pki.CA, "--tls-auth-clients", "yes"}})
	withCert := fmt.Sprintf("tls_ca_file = %q\ntls_cert_file = %q\ntls_key_file = %q\n", pki.CA, pki.ClientCert, pki.ClientKey)
	for _, mode := range []struct{ name, url, extra string }{
		{"plain", plain.URL(), ""},
		{"tls", fmt.Sprintf("rediss://127.0.0.1:%d/0", secure.Port), withCert},
	} {
		p := ReplicaConfig(b, mode.url, "bench-"+mode.name, "", mode.extra)
		p.Start(b)
		b.Run(mode.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				start := time.Now()
				reg := p.Register(b, "bench", "e1")
				lat = append(lat, time.Since(start))
				b.StopTimer()
				p.Revoke(b, reg.ExecutionID)
				b.StartTimer()
			}
			b.ReportMetric(float64(percentile(lat, .5).Microseconds()), "p50-µs")
			b.ReportMetric(float64(percentile(lat, .99).Microseconds()), "p99-µs")
		})
	}
}
