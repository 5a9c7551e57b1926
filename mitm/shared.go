package mitm

import (
	"crypto/tls"
	"errors"
	"net"
)

// bulkBuffer is the size of the buffers that carry bodies: 64 KiB is four
// full TLS records per system call.
const bulkBuffer = 64 << 10

// sessionCacheSize bounds the upstream TLS sessions kept for resumption.
const sessionCacheSize = 1024

// sharedTLS is what every tunnel of one Interceptor shares: one server
// configuration (so the session ticket keys are the same for every
// connection and a returning client resumes instead of doing a full
// handshake) and one client session cache toward the upstreams (so a new
// tunnel to a host already seen resumes its TLS session).
type sharedTLS struct {
	server   *tls.Config
	roots    *tls.Config // upstream template: roots, ALPN, minimum version
	sessions tls.ClientSessionCache
}

// hostConn carries the CONNECT host into the shared server configuration's
// GetCertificate: the leaf is for the host the CONNECT named and was
// admitted for, never for whatever the client's SNI says.
type hostConn struct {
	net.Conn
	host string
}

func (i *Interceptor) shared() *sharedTLS {
	i.once.Do(func() {
		a := i.Authority
		i.tls = &sharedTLS{
			server: &tls.Config{
				NextProtos: []string{"h2", "http/1.1"},
				MinVersion: tls.VersionTLS12,
				GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
					hc, ok := hello.Conn.(*hostConn)
					if !ok {
						return nil, errors.New("mitm: handshake on a connection without its CONNECT host")
					}
					return a.Leaf(hc.host)
				},
			},
			roots: &tls.Config{
				RootCAs:    i.Roots,
				NextProtos: []string{"h2", "http/1.1"},
				MinVersion: tls.VersionTLS12,
			},
			sessions: tls.NewLRUClientSessionCache(sessionCacheSize),
		}
	})
	return i.tls
}

// upstreamConfig is the client configuration toward host's upstream:
// verified against Roots for host (there is no fallback), with the shared
// session cache. A resumed session was verified when it was made and is
// only offered for the same name.
func (s *sharedTLS) upstreamConfig(host string) *tls.Config {
	c := s.roots.Clone()
	c.ServerName = host
	c.ClientSessionCache = s.sessions
	return c
}

// Prepare starts minting host's leaf ahead of the handshake (see
// Authority.Prepare); the caller admits a CONNECT and calls it before its
// success reply.
func (i *Interceptor) Prepare(host string) { i.Authority.Prepare(host) }
