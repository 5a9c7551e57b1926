package test

// Redis AUTH and TLS in cluster mode (SPEC §7.7): requirepass with the
// password in the URL or in cluster.password_env, an ACL user, and
// rediss:// against a redis-server started with --tls-port, certificates
// generated here (CA, server certificate for 127.0.0.1, client
// certificate) and --tls-auth-clients yes.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveFails runs `netproxy serve` on p and returns its exit code and
// output (it must exit on its own).
func serveFails(t *testing.T, p *Proxy) (int, string) {
	t.Helper()
	cmd := NetproxyCmd(t, p, "serve", "--config", p.ConfigPath)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("serve did not exit within 20s:\n%s", out)
	}
	code := 0
	if ee, ok := err.(interface{ ExitCode() int }); ok {
		code = ee.ExitCode()
	}
	return code, string(out)
}

// attributedAcross registers an execution on a and checks that a framed
// CONNECT through b is attributed (b learns it through Redis).
func attributedAcross(t *testing.T, a, b *ClusterReplica, up *Upstream) {
	t.Helper()
	reg := a.Register(t, "access-"+b.Node, "access-env")
	if s := framedConnect(t, b.HTTP, reg.Token, "up.test", up.Port); !strings.Contains(s, " 200") {
		t.Fatalf("execution registered on %s, framed CONNECT through %s: %q", a.Node, b.Node, s)
	}
}

func TestClusterRedisAuth(t *testing.T) {
	const pw, alicePW, wrong = "e2e-requirepass-Pw1", "e2e-alice-Pw2", "e2e-wrong-Pw3"
	up := StartUpstream(t, false)
	rds := StartRedisWith(t, &Redis{Args: []string{"--requirepass", pw}, Password: pw})
	// An ACL user limited to the cluster's keys (and the commands it uses).
	cl := rds.Client()
	if err := cl.Do(context.Background(), "ACL", "SETUSER", "alice", "on", ">"+alicePW, "~e2e:*", "&*", "+@all", "-@dangerous", "+info").Err(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	hostPort := fmt.Sprintf("127.0.0.1:%d", rds.Port)

	// The password in the URL (default user), in password_env, and an ACL user:password in the URL.
	t.Setenv("E2E_REDIS_PW", pw)
	a := StartReplica(t, fmt.Sprintf("redis://:%s@%s/0", pw, hostPort), "node-a", "")
	pb := ReplicaConfig(t, "redis://"+hostPort+"/0", "node-b", "", "password_env = \"E2E_REDIS_PW\"\n")
	pb.Start(t)
	b := &ClusterReplica{apprProxy: &apprProxy{Proxy: pb, t: t}, Node: "node-b"}
	pc := ReplicaConfig(t, fmt.Sprintf("redis://alice:%s@%s/0", alicePW, hostPort), "node-c", "", "")
	pc.Start(t)
	c := &ClusterReplica{apprProxy: &apprProxy{Proxy: pc, t: t}, Node: "node-c"}
	attributedAcross(t, a, b, up)
	attributedAcross(t, b, c, up)
	attributedAcross(t, c, a, up)
	for _, r := range []*ClusterReplica{a, b, c} {
		for _, s := range []string{pw, alicePW} {
			if strings.Contains(r.Output.String(), s) {
				t.Errorf("%s's output shows a Redis password", r.Node)
			}
		}
	}

	// Refused credentials: exit 2 naming the setting, never the password.
	t.Setenv("E2E_REDIS_WRONG", wrong)
	t.Setenv("E2E_REDIS_EMPTY", "")
	for _, tc := range []struct{ name, url, extra, want string }{
		{"no password", "redis://" + hostPort + "/0", "", "cluster.redis"},
		{"wrong password in the URL", fmt.Sprintf("redis://:%s@%s/0", wrong, hostPort), "", "cluster.redis"},
		{"wrong password in password_env", "redis://" + hostPort + "/0", "password_env = \"E2E_REDIS_WRONG\"\n", "cluster.password_env"},
		{"password_env empty", "redis://" + hostPort + "/0", "password_env = \"E2E_REDIS_EMPTY\"\n", "cluster.password_env"},
		{"ACL user, wrong password", fmt.Sprintf("redis://alice:%s@%s/0", wrong, hostPort), "", "cluster.redis"},
	} {
		code, out := serveFails(t, ReplicaConfig(t, tc.url, "node-x", "", tc.extra))
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d, output %q; want exit 2 naming %s", tc.name, code, out, tc.want)
		}
		if strings.Contains(out, wrong) || strings.Contains(out, pw) {
			t.Errorf("%s: the output shows the password: %q", tc.name, out)
		}
	}
}

// testPKI is a CA and a server and a client certificate signed by it, as
// PEM files in dir.
type testPKI struct{ CA, ServerCert, ServerKey, ClientCert, ClientKey string }

func newTestPKI(t testing.TB) testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e cluster CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, []byte) {
		k := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: ips,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der, kd
	}
	sc, sk := leaf(2, "127.0.0.1", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	cc, ck := leaf(3, "netproxy replica", x509.ExtKeyUsageClientAuth, nil)
	return testPKI{
		CA:         write("ca.pem", "CERTIFICATE", caDER),
		ServerCert: write("server.pem", "CERTIFICATE", sc), ServerKey: write("server.key", "PRIVATE KEY", sk),
		ClientCert: write("client.pem", "CERTIFICATE", cc), ClientKey: write("client.key", "PRIVATE KEY", ck),
	}
}

// clientTLS is the test's own client's TLS configuration.
func (p testPKI) clientTLS(t testing.TB) *tls.Config {
	t.Helper()
	caPEM, _ := os.ReadFile(p.CA)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1"}
}

func TestClusterRedisTLS(t *testing.T) {
	up := StartUpstream(t, false)
	pki := newTestPKI(t)
	rds := StartRedisWith(t, &Redis{TLS: pki.clientTLS(t), Args: []string{"--tls-cert-file", pki.ServerCert,
		"--tls-key-file", pki.ServerKey, "--tls-ca-cert-file", pki.CA, "--tls-auth-clients", "yes"}})
	url := fmt.Sprintf("rediss://127.0.0.1:%d/0", rds.Port)
	withCert := fmt.Sprintf("tls_ca_file = %q\ntls_cert_file = %q\ntls_key_file = %q\n", pki.CA, pki.ClientCert, pki.ClientKey)
	start := func(node string) *ClusterReplica {
		p := ReplicaConfig(t, url, node, "", withCert)
		p.Start(t)
		return &ClusterReplica{apprProxy: &apprProxy{Proxy: p, t: t}, Node: node}
	}
	a, b := start("node-a"), start("node-b")
	attributedAcross(t, a, b, up)
	attributedAcross(t, b, a, up)
	if n := rds.Client().ClientList(context.Background()).Val(); !strings.Contains(n, "netproxy-node-a") {
		t.Fatalf("node-a is not a client of the TLS server: %s", n)
	}

	for _, tc := range []struct{ name, url, extra, want string }{
		{"no client certificate", url, fmt.Sprintf("tls_ca_file = %q\n", pki.CA), "cluster.tls_cert_file"},
		{"system roots (server's CA unknown)", url, fmt.Sprintf("tls_cert_file = %q\ntls_key_file = %q\n", pki.ClientCert, pki.ClientKey), "x509"},
		{"plain redis:// against the TLS port", fmt.Sprintf("redis://127.0.0.1:%d/0", rds.Port), "", "cluster.redis"},
		{"certificate without its key", url, fmt.Sprintf("tls_ca_file = %q\ntls_cert_file = %q\n", pki.CA, pki.ClientCert), "cluster.tls_key_file"},
		{"TLS files with redis://", fmt.Sprintf("redis://127.0.0.1:%d/0", rds.Port), fmt.Sprintf("tls_ca_file = %q\n", pki.CA), "needs a rediss://"},
	} {
		code, out := serveFails(t, ReplicaConfig(t, tc.url, "node-x", "", tc.extra))
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d, output %q; want exit 2 naming %s", tc.name, code, out, tc.want)
		}
		t.Logf("%s: %s", tc.name, strings.TrimSpace(out))
	}
}
