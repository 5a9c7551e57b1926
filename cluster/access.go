package cluster

// Redis access (SPEC §7.7): AUTH with the password in the URL or in the
// variable cluster.password_env, and TLS for rediss:// with the CA and
// client certificate files of [cluster]. A password is never part of an
// error or a log line.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/netproxy/netproxy/cluster/settings"
)

// redisOptions builds the go-redis options of cfg: the URL's, the
// password of password_env and the TLS files. Errors name the setting.
func redisOptions(cfg settings.Settings) (*redis.UniversalOptions, error) {
	uo, err := settings.ParseURL(cfg.Redis)
	if err != nil {
		return nil, fmt.Errorf("cluster.redis: %v", err)
	}
	if cfg.PasswordEnv != "" {
		pw := os.Getenv(cfg.PasswordEnv)
		if pw == "" {
			return nil, fmt.Errorf("cluster.password_env: the environment variable %s is unset or empty; set it to the Redis password of this replica", cfg.PasswordEnv)
		}
		uo.Password = pw
		if uo.MasterName != "" && uo.SentinelPassword == "" {
			uo.SentinelPassword = pw
		}
	}
	if uo.TLSConfig == nil {
		return uo, nil // redis:// (Validate refuses tls_* files without rediss://)
	}
	tc := uo.TLSConfig.Clone()
	tc.MinVersion = tls.VersionTLS12
	if cfg.TLSCAFile != "" {
		pem, err := os.ReadFile(cfg.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("cluster.tls_ca_file: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cluster.tls_ca_file: %s holds no PEM certificate", cfg.TLSCAFile)
		}
		tc.RootCAs = pool
	}
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("cluster.tls_cert_file / cluster.tls_key_file: %v", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	uo.TLSConfig = tc
	return uo, nil
}

// accessHint says which setting a failed first contact points at: a
// refused password, a missing one, or a TLS handshake the server ended
// (typically because it wants a client certificate).
func accessHint(err error, cfg settings.Settings) string {
	msg := err.Error()
	var ne net.Error
	switch {
	case strings.Contains(msg, "WRONGPASS"), strings.Contains(msg, "NOAUTH"), strings.Contains(msg, "invalid password"),
		strings.Contains(msg, "AUTH <password> called without any password"):
		where := "the password in cluster.redis"
		if cfg.PasswordEnv != "" {
			where = "the password in $" + cfg.PasswordEnv + " (cluster.password_env)"
		}
		return fmt.Sprintf(" (Redis refused the credentials: check the user name in cluster.redis and %s)", where)
	case strings.Contains(msg, "tls: "), strings.Contains(msg, "x509: "):
		if cfg.TLSCertFile == "" {
			return " (the TLS handshake failed: if the server requires client certificates, set cluster.tls_cert_file and cluster.tls_key_file; check cluster.tls_ca_file)"
		}
		return " (the TLS handshake failed: check cluster.tls_ca_file, cluster.tls_cert_file and cluster.tls_key_file)"
	case strings.HasPrefix(cfg.Redis, "rediss") && (errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) || strings.Contains(msg, "EOF") || strings.Contains(msg, "reset by peer")):
		if cfg.TLSCertFile == "" {
			return " (the TLS connection was closed: if the server requires client certificates, set cluster.tls_cert_file and cluster.tls_key_file)"
		}
	}
	return ""
}
