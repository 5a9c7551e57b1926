// Package settings owns the [cluster] settings (docs/cluster.md): their
// defaults, the Redis URL parser and the validator that both cluster.Open
// and the config loader call.
//
// It is a leaf package (it imports only go-redis for URL parsing) so that
// internal/config can map its TOML onto Settings without an import cycle. It
// must never dial, read files or print a password.
package settings

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// DefaultKeyPrefix is where every key of a cluster lives in Redis.
const DefaultKeyPrefix = "netproxy:"

// Settings configures cluster mode. Redis == "" means single node.
type Settings struct {
	Redis     string // redis://, rediss://, redis-sentinel://, rediss-sentinel://
	NodeID    string // default hostname-pid
	KeyPrefix string // default "netproxy:"
	// KeyFile is the HMAC-SHA256 key of every record netproxy writes
	// (its bytes, at least MinKeyBytes, mode 0600 or stricter). Required.
	KeyFile string
	// PasswordEnv names the environment variable holding the Redis AUTH
	// password (instead of writing it into the URL).
	PasswordEnv string
	// TLS of a rediss:// URL: the CA bundle that signs the server's
	// certificate (empty: the system roots) and this replica's client
	// certificate and key (both or neither).
	TLSCAFile, TLSCertFile, TLSKeyFile string
	// AdvertiseHTTP and AdvertiseSOCKS5 are the proxy addresses
	// POST /v1/executions hands out ("host:port", e.g. the load balancer's
	// in front of the replicas); empty: this replica's own listeners.
	AdvertiseHTTP, AdvertiseSOCKS5 string
}

// MinKeyBytes is the shortest accepted cluster.key_file.
const MinKeyBytes = 32

// Enabled reports whether cluster mode is on.
func (s Settings) Enabled() bool { return strings.TrimSpace(s.Redis) != "" }

// FieldError is one invalid setting; Key is relative to [cluster].
type FieldError struct {
	Key string
	Msg string
}

func (e *FieldError) Error() string { return e.Key + ": " + e.Msg }

// WithDefaults fills an empty node id (hostname-pid) and key prefix.
func (s Settings) WithDefaults() Settings {
	if strings.TrimSpace(s.NodeID) == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "node"
		}
		s.NodeID = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	if s.KeyPrefix == "" {
		s.KeyPrefix = DefaultKeyPrefix
	}
	return s
}

// Validate returns every invalid field (nil when valid or cluster mode is off).
func (s Settings) Validate() []*FieldError {
	var errs []*FieldError
	if !s.Enabled() {
		return nil
	}
	if _, err := ParseURL(s.Redis); err != nil {
		errs = append(errs, &FieldError{Key: "redis", Msg: err.Error()})
	}
	for _, r := range s.NodeID {
		if r <= ' ' || r == 0x7f {
			errs = append(errs, &FieldError{Key: "node_id", Msg: "must not contain spaces or control characters"})
			break
		}
	}
	if len(s.NodeID) > 128 {
		errs = append(errs, &FieldError{Key: "node_id", Msg: "longer than 128 bytes"})
	}
	if strings.TrimSpace(s.KeyFile) == "" {
		errs = append(errs, &FieldError{Key: "key_file", Msg: fmt.Sprintf("required in cluster mode: a file of at least %d random bytes, mode 0600, the same on every replica (e.g. head -c 32 /dev/urandom > cluster.key; chmod 600 cluster.key)", MinKeyBytes)})
	}
	errs = append(errs, s.validateAccess()...)
	for _, f := range []struct{ key, val string }{{"advertise_http", s.AdvertiseHTTP}, {"advertise_socks5", s.AdvertiseSOCKS5}} {
		if f.val == "" {
			continue
		}
		if h, p, err := net.SplitHostPort(f.val); err != nil || h == "" || p == "" {
			errs = append(errs, &FieldError{Key: f.key, Msg: fmt.Sprintf("%q is not host:port (the address executions are told to use, e.g. the load balancer's)", f.val)})
		}
	}
	if strings.ContainsAny(s.KeyPrefix, " \t\r\n") {
		errs = append(errs, &FieldError{Key: "key_prefix", Msg: "must not contain white space"})
	}
	return errs
}

// validateAccess checks password_env and the tls_* settings against the URL.
func (s Settings) validateAccess() []*FieldError {
	var errs []*FieldError
	u, err := url.Parse(strings.TrimSpace(s.Redis))
	if err != nil {
		return nil // reported as cluster.redis
	}
	if s.PasswordEnv != "" {
		if strings.ContainsAny(s.PasswordEnv, "= \t\r\n\x00") {
			errs = append(errs, &FieldError{Key: "password_env", Msg: "is the name of an environment variable (no '=' or white space)"})
		}
		if _, has := u.User.Password(); has {
			errs = append(errs, &FieldError{Key: "password_env", Msg: "the redis URL holds a password too; give it in one place (drop it from the URL)"})
		}
	}
	tlsScheme := strings.HasPrefix(u.Scheme, "rediss")
	for _, f := range []struct{ key, val string }{{"tls_ca_file", s.TLSCAFile}, {"tls_cert_file", s.TLSCertFile}, {"tls_key_file", s.TLSKeyFile}} {
		if f.val != "" && !tlsScheme {
			errs = append(errs, &FieldError{Key: f.key, Msg: "needs a rediss:// (TLS) URL in cluster.redis"})
		}
	}
	switch {
	case s.TLSCertFile != "" && s.TLSKeyFile == "":
		errs = append(errs, &FieldError{Key: "tls_key_file", Msg: "required with tls_cert_file (the client certificate's private key)"})
	case s.TLSKeyFile != "" && s.TLSCertFile == "":
		errs = append(errs, &FieldError{Key: "tls_cert_file", Msg: "required with tls_key_file (the client certificate)"})
	}
	return errs
}

// ParseURL turns the configured URL into go-redis options. redis:// and
// rediss:// name one server; redis-sentinel:// and rediss-sentinel:// name a
// sentinel (more with addr= parameters) and need master_name=. Errors never
// contain the password.
func ParseURL(raw string) (*redis.UniversalOptions, error) {
	raw = strings.TrimSpace(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s is not a URL", Redact(raw))
	}
	switch u.Scheme {
	case "redis", "rediss":
		o, err := redis.ParseURL(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %s", Redact(raw), scrub(err, u))
		}
		return &redis.UniversalOptions{
			Addrs: []string{o.Addr}, DB: o.DB, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
			DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout, Protocol: o.Protocol,
		}, nil
	case "redis-sentinel", "rediss-sentinel":
		v := *u
		v.Scheme = strings.TrimSuffix(u.Scheme, "-sentinel")
		o, err := redis.ParseFailoverURL(v.String())
		if err != nil {
			return nil, fmt.Errorf("%s: %s", Redact(raw), scrub(err, u))
		}
		if o.MasterName == "" {
			return nil, fmt.Errorf("%s: a sentinel URL needs master_name=NAME", Redact(raw))
		}
		return &redis.UniversalOptions{
			Addrs: o.SentinelAddrs, MasterName: o.MasterName, DB: o.DB, Username: o.Username, Password: o.Password,
			SentinelUsername: o.SentinelUsername, SentinelPassword: o.SentinelPassword, TLSConfig: o.TLSConfig,
			DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout, Protocol: o.Protocol,
		}, nil
	case "":
		return nil, fmt.Errorf("the URL has no scheme; write redis://host:6379/0, rediss://… or redis-sentinel://host:26379?master_name=NAME")
	default:
		return nil, fmt.Errorf("scheme %q is not redis, rediss, redis-sentinel or rediss-sentinel", u.Scheme)
	}
}

// Redact returns the URL for messages, with nothing that may hold a
// secret: the password is replaced, and only the scheme, the user name,
// the host, a numeric database path and master_name are kept (a fragment,
// an opaque part, another path or query could be a mistyped password).
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		return "(the URL, not shown: it is not scheme://host…)"
	}
	out := url.URL{Scheme: u.Scheme, Host: u.Host}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			out.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			out.User = url.User(u.User.Username())
		}
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		if strings.Trim(db, "0123456789") == "" {
			out.Path = u.Path
		} else {
			out.Path = "/…"
		}
	}
	if u.RawQuery != "" {
		q := url.Values{}
		if m := u.Query().Get("master_name"); m != "" {
			q.Set("master_name", m)
		}
		out.RawQuery = q.Encode()
		if len(u.Query()) > len(q) {
			out.RawQuery += "&…"
		}
	}
	return out.String()
}

func scrub(err error, u *url.URL) string {
	msg := err.Error()
	// go-redis repeats the part it rejects after its complaint ("redis:
	// invalid URL path: /0/…", "invalid database number: \"…\""), which may
	// be a mistyped password: keep only the complaint.
	if rest, ok := strings.CutPrefix(msg, "redis: "); ok {
		if i := strings.Index(rest, ": "); i >= 0 {
			msg = msg[:len("redis: ")+i]
		}
	} else if i := strings.IndexAny(msg, ":\""); i >= 0 {
		msg = msg[:i]
	}
	if p, ok := u.User.Password(); ok && p != "" {
		msg = strings.ReplaceAll(msg, p, "xxxxx")
	}
	return msg
}
