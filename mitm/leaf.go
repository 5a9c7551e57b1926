package mitm

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Leaf lifetime: backdated for clients with a slow clock; a cached leaf
// this close to its end is minted again.
const (
	leafBackdate = 24 * time.Hour
	leafLifetime = 90 * 24 * time.Hour
	leafRenew    = 7 * 24 * time.Hour
)

// mintLeaf signs a leaf for host with the CA. The leaf's key is always
// ECDSA P-256, whatever the CA's key: generating it takes microseconds
// (an RSA-2048 key takes tens of milliseconds), and its handshake
// signature is the cheapest a TLS 1.2/1.3 client accepts.
func mintLeaf(ca *tls.Certificate, host string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"netproxy interception"}},
		NotBefore:             now.Add(-leafBackdate),
		NotAfter:              now.Add(leafLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
		tmpl.Subject.CommonName = host
	}
	if tmpl.NotAfter.After(ca.Leaf.NotAfter) {
		// A leaf outliving its CA would fail verification at the end.
		tmpl.NotAfter = ca.Leaf.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Leaf, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	chain := make([][]byte, 0, 1+len(ca.Certificate))
	chain = append(append(chain, der), ca.Certificate...)
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, nil
}

// minting is one leaf being minted; waiters block on done.
type minting struct {
	done chan struct{}
	cert *tls.Certificate
	err  error
}

// Prepare starts minting host's leaf in the background unless it is cached
// or already being minted, so that the handshake that follows finds it
// ready: the caller does this when it admits a CONNECT, before its 200, and
// the mint overlaps the client's round trip for its ClientHello.
func (a *Authority) Prepare(host string) {
	if c, ok := a.cache.Get(host); ok && a.fresh(c, time.Now()) {
		return
	}
	a.mu.Lock()
	if _, ok := a.inflight[host]; ok {
		a.mu.Unlock()
		return
	}
	m := &minting{done: make(chan struct{})}
	a.inflight[host] = m
	a.mu.Unlock()
	go a.mint(host, m)
}

// mint fills m and the cache, then releases m's waiters.
func (a *Authority) mint(host string, m *minting) {
	m.cert, m.err = mintLeaf(&a.ca, host, time.Now())
	if m.err != nil {
		m.err = fmt.Errorf("mitm: minting a leaf for %s: %w", host, m.err)
	} else {
		a.cache.Add(host, m.cert)
	}
	a.mu.Lock()
	delete(a.inflight, host)
	a.mu.Unlock()
	close(m.done)
}

// fresh reports whether a cached leaf may still be served: not near its
// end, or ending with the CA (a new mint could not last longer).
func (a *Authority) fresh(c *tls.Certificate, now time.Time) bool {
	end := c.Leaf.NotAfter
	return now.Add(leafRenew).Before(end) || (now.Before(end) && !end.Before(a.ca.Leaf.NotAfter))
}
