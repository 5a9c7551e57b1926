// Package config owns netproxy's TOML configuration (SPEC §7.2): its schema,
// the embedded default, loading with unknown keys rejected, and validation
// whose every error names its key path (and file:line where known).
//
// It must never compile policy itself (hostpolicy does) nor touch the network.
package config

import (
	"time"

	"github.com/netproxy/netproxy/approvalsvc/settings"
	clustersettings "github.com/netproxy/netproxy/cluster/settings"
)

// Config is the whole netproxy configuration. Every key a file leaves out
// takes the embedded default's value.
type Config struct {
	Listen      Listen      `toml:"listen"`
	Control     Control     `toml:"control"`
	Network     Network     `toml:"network"`
	DNS         DNS         `toml:"dns"`
	Attribution Attribution `toml:"attribution"`
	Approvals   Approvals   `toml:"approvals"`
	Guardian    Guardian    `toml:"guardian"`
	Admin       Admin       `toml:"admin"`
	Audit       Audit       `toml:"audit"`
	Limits      Limits      `toml:"limits"`
	MITM        MITM        `toml:"mitm"`
	Metrics     Metrics     `toml:"metrics"`
	Log         Log         `toml:"log"`
	Shadow      Shadow      `toml:"shadow"`
	Cluster     Cluster     `toml:"cluster"`
	Budgets     Budgets     `toml:"budgets"`

	// Credentials are the [[credentials]] entries (docs/credentials.md).
	Credentials []Credential `toml:"credentials"`
	// ProxyAuth is [proxy_auth]: client identity (SPEC §4.4, proxyauth.go).
	ProxyAuth ProxyAuth `toml:"proxy_auth"`

	// Path is the file this config was loaded from ("" for the embedded
	// default); relative paths inside it resolve against its folder.
	Path string `toml:"-"`
}

type Listen struct {
	HTTP   string `toml:"http"`
	SOCKS5 string `toml:"socks5"`
	Admin  string `toml:"admin"`
}

type Control struct {
	Socket string `toml:"socket"`
}

type Network struct {
	// Enabled is the operator's kill switch: when false every request is
	// blocked with proxy_disabled (source proxy_state) while the listeners
	// stay bound, so a reload can turn egress off and on again.
	Enabled           bool   `toml:"enabled"`
	Mode              string `toml:"mode"` // "full" | "limited"
	AllowLocalBinding bool   `toml:"allow_local_binding"`
	// CheckTLSName: an opaque tunnel to a name must carry no SNI or its
	// own (SPEC §3.11).
	CheckTLSName bool              `toml:"check_tls_name"`
	Domains      map[string]string `toml:"domains"` // pattern → "allow" | "deny"
	DomainFiles  []DomainFile      `toml:"domain_files"`
	// Requests are the request rules (SPEC §3.10), in file order: their
	// index is the "rule" a block reports.
	Requests []RequestRule `toml:"requests"`
	// UpstreamProxy is an optional http:// parent proxy.
	UpstreamProxy string `toml:"upstream_proxy"`
}

// RequestRule is one [[network.requests]] table (SPEC §3.10).
type RequestRule struct {
	Hosts   []string `toml:"hosts"`
	Methods []string `toml:"methods"`
	Paths   []string `toml:"paths"`
	Action  string   `toml:"action"` // allow | deny | ask
	Message string   `toml:"message"`
}

type DomainFile struct {
	Path     string `toml:"path"`
	Decision string `toml:"decision"` // "allow" | "deny"
}

type DNS struct {
	Timeout Duration `toml:"timeout"`
	// Servers are "ip:port" name servers for every lookup; empty: the
	// system's resolv.conf.
	Servers []string            `toml:"servers"`
	Hosts   map[string][]string `toml:"hosts"`
}

type Attribution struct {
	Required bool `toml:"required"`
}

type Approvals struct {
	Enabled  bool     `toml:"enabled"`
	Reviewer string   `toml:"reviewer"` // "user" | "guardian"
	Policy   string   `toml:"policy"`   // never | on-request | untrusted | granular[:flags]
	Timeout  Duration `toml:"timeout"`
	// ClientWait bounds one request's wait for its review (SPEC §3.7).
	ClientWait Duration `toml:"client_wait"`
	Hooks      []Hook   `toml:"hooks"`
	// MaxPending and MaxPendingPerSession bound the reviews in progress
	// (SPEC §5): past them a request is denied with approvals_overloaded.
	MaxPending           int `toml:"max_pending"`
	MaxPendingPerSession int `toml:"max_pending_per_session"`
}

// Settings maps [approvals] onto the approval service's own settings type;
// the service validates them (settings.Validate), not this package.
func (a Approvals) Settings() settings.Settings {
	s := settings.Settings{
		Enabled: a.Enabled, Reviewer: a.Reviewer, Policy: a.Policy, Timeout: a.Timeout.Duration,
		ClientWait: a.ClientWait.Duration, MaxPending: a.MaxPending, MaxPendingPerSession: a.MaxPendingPerSession,
	}
	for _, h := range a.Hooks {
		s.Hooks = append(s.Hooks, settings.Hook{Command: append([]string(nil), h.Command...), Timeout: h.Timeout.Duration})
	}
	return s
}

type Hook struct {
	Command []string `toml:"command"`
	Timeout Duration `toml:"timeout"`
}

type Guardian struct {
	Backend   string   `toml:"backend"` // "starlark" | "webhook" | "openai"
	Script    string   `toml:"script"`
	URL       string   `toml:"url"`         // webhook URL or OpenAI-compatible base URL
	Model     string   `toml:"model"`       // openai backend
	APIKeyEnv string   `toml:"api_key_env"` // openai backend: env var holding the key
	Timeout   Duration `toml:"timeout"`
}

type Admin struct {
	TokenEnv string `toml:"token_env"`
	// AllowedHosts are names, besides loopback literals and localhost, that
	// a request's Host header may carry on the admin listener (SPEC §7.3);
	// any other Host is answered 421.
	AllowedHosts []string `toml:"allowed_hosts"`
}

type Audit struct {
	Path       string `toml:"path"`
	BufferSize int    `toml:"buffer_size"`
}

type Limits struct {
	MaxConnections int      `toml:"max_connections"`
	HeaderTimeout  Duration `toml:"header_timeout"`
	IdleTimeout    Duration `toml:"idle_timeout"`
	MaxHeaderBytes int      `toml:"max_header_bytes"`
	MaxHeaders     int      `toml:"max_headers"`
	ConnectTimeout Duration `toml:"connect_timeout"`
}

// MITM is [mitm]: opt-in TLS interception of limited-mode CONNECT. The
// paths are PEM files, relative to the config file's folder.
type MITM struct {
	Enabled    bool   `toml:"enabled"`
	CACert     string `toml:"ca_cert"`
	CAKey      string `toml:"ca_key"`
	UpstreamCA string `toml:"upstream_ca"` // extra roots for upstreams ("" = system roots only)
}

type Metrics struct {
	MaxHostLabels int `toml:"max_host_labels"`
}

// Shadow is [shadow]: a candidate configuration whose [network] and [dns]
// parts are compiled like the live ones (and reloaded with them) and
// judged beside every live decision without ever changing it. A candidate
// that does not load never keeps the live configuration from loading.
type Shadow struct {
	// Config is the candidate file, relative to this file's folder; ""
	// means no shadow policy.
	Config string `toml:"config"`
}

type Log struct {
	Level  string `toml:"level"`  // debug | info | warn | error
	Format string `toml:"format"` // text | json
}

// Cluster is [cluster]: cluster mode on Redis (docs/cluster.md). Off while
// Redis is empty.
type Cluster struct {
	Redis     string `toml:"redis"`
	NodeID    string `toml:"node_id"`
	KeyPrefix string `toml:"key_prefix"`
	// KeyFile holds the HMAC key every shared record is authenticated
	// with (SPEC §7.7); required in cluster mode.
	KeyFile string `toml:"key_file"`
	// PasswordEnv names the variable holding the Redis AUTH password.
	PasswordEnv string `toml:"password_env"`
	// TLS of a rediss:// URL (CA: empty means the system roots).
	TLSCAFile   string `toml:"tls_ca_file"`
	TLSCertFile string `toml:"tls_cert_file"`
	TLSKeyFile  string `toml:"tls_key_file"`
	// The proxy addresses registrations hand out (a load balancer's).
	AdvertiseHTTP   string `toml:"advertise_http"`
	AdvertiseSOCKS5 string `toml:"advertise_socks5"`
}

// Settings maps [cluster] onto the cluster package's own settings type.
func (c Cluster) Settings() clustersettings.Settings {
	return clustersettings.Settings{Redis: c.Redis, NodeID: c.NodeID, KeyPrefix: c.KeyPrefix, KeyFile: c.KeyFile,
		PasswordEnv: c.PasswordEnv, TLSCAFile: c.TLSCAFile, TLSCertFile: c.TLSCertFile, TLSKeyFile: c.TLSKeyFile,
		AdvertiseHTTP: c.AdvertiseHTTP, AdvertiseSOCKS5: c.AdvertiseSOCKS5}
}

// Duration is a time.Duration written in TOML as a Go duration string ("2s").
type Duration struct{ time.Duration }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.Duration.String()), nil }
