package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/netproxy/netproxy/configs"
	"github.com/netproxy/netproxy/credentials"
	"github.com/netproxy/netproxy/hostpolicy"
	"github.com/netproxy/netproxy/hostpolicy/hostname"
	"github.com/netproxy/netproxy/internal/admin"
)

// Error is one configuration problem: where it is and what to do.
type Error struct {
	File   string // "" for the embedded default
	Line   int    // 0 when unknown
	Column int
	Key    string // TOML key path, e.g. network.domains."*"
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
			if e.Column > 0 {
				fmt.Fprintf(&b, ":%d", e.Column)
			}
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Default returns the embedded default configuration (configs/default.toml)
// with its paths expanded. It panics only if the embedded file is broken,
// which the package tests rule out.
func Default() *Config {
	c, errs := decode(configs.DefaultTOML, "")
	if len(errs) > 0 {
		panic(fmt.Sprintf("embedded default configuration is invalid: %v", errors.Join(errs...)))
	}
	return c
}

// Load reads the file at path over the embedded default, rejects unknown
// keys, resolves paths and validates every value. The error joins every
// problem found (each an *Error naming its key and, where known, file:line).
func Load(path string) (*Config, error) {
	c, errs := load(path)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// Validate returns every problem of the file at path (nil when it is valid),
// including unreadable domain files. Pattern syntax is checked here too, with
// the same parser the policy compiler uses.
func Validate(path string) []error {
	c, errs := load(path)
	if c != nil {
		fileErrs := validateDomainFiles(c)
		if data, err := os.ReadFile(c.Path); err == nil {
			fileErrs = withLines(fileErrs, data)
		}
		errs = append(errs, fileErrs...)
	}
	return errs
}

// Parse decodes TOML bytes as if read from the file name (used for its
// folder and in messages) over the embedded default, and validates them.
func Parse(data []byte, name string) (*Config, error) {
	c, errs := decode(data, name)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

func load(path string) (*Config, []error) {
	if path == "" {
		return nil, []error{&Error{Msg: "no configuration file given"}}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, []error{&Error{File: path, Msg: err.Error()}}
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, []error{&Error{File: path, Msg: fmt.Sprintf("cannot read configuration file: %v", err)}}
	}
	c, errs := decodeNamed(data, abs, path)
	return c, errs
}

func decode(data []byte, file string) (*Config, []error) { return decodeNamed(data, file, file) }

// decodeNamed decodes the embedded default, then data over it. file is the
// absolute path (for relative paths); shown is the name used in messages.
func decodeNamed(data []byte, file, shown string) (*Config, []error) {
	return decodeOver(configs.DefaultTOML, data, file, shown)
}

// maxTypeErrors bounds how many wrong-typed values one document can report;
// past it the rest of the file is not examined.
const maxTypeErrors = 64

// decodeOver decodes base (the embedded default), then data over it. A TOML
// syntax error stops everything (nothing after it can be trusted), but a
// wrong-typed value does not: it is recorded, its key = value expression is
// blanked (line numbers kept) and the document decoded again, so that one
// run reports every problem.
func decodeOver(base, data []byte, file, shown string) (*Config, []error) {
	fresh := func() (*Config, error) {
		c := &Config{}
		if err := toml.Unmarshal(base, c); err != nil {
			return nil, &Error{File: "configs/default.toml", Msg: err.Error()}
		}
		return c, nil
	}
	c, err := fresh()
	if err != nil {
		return nil, []error{err}
	}
	var errs []error
	var typeKeys []string
	if file != "" {
		doc := data
		for {
			// A collection the file sets replaces the default's, never merges.
			var raw map[string]any
			if err := toml.Unmarshal(doc, &raw); err != nil {
				if len(errs) > 0 {
					// Blanking made the document unparsable: report what was found.
					return nil, errs
				}
				return nil, []error{tomlError(err, shown)}
			}
			if c, err = fresh(); err != nil {
				return nil, []error{err}
			}
			resetSetCollections(c, raw)
			dec := toml.NewDecoder(bytes.NewReader(doc))
			dec.DisallowUnknownFields()
			err := dec.Decode(c)
			if err == nil {
				break
			}
			// StrictMissingError unwraps to DecodeErrors too: test it first.
			var sm *toml.StrictMissingError
			if errors.As(err, &sm) {
				// Unknown keys: report each, then keep validating the rest
				// (go-toml decoded every known key).
				for i := range sm.Errors {
					errs = append(errs, unknownKeyError(&sm.Errors[i], shown))
				}
				break
			}
			var de *toml.DecodeError
			if !errors.As(err, &de) {
				// A value go-toml handed to a TextUnmarshaler (a duration
				// written as a number) fails without a position: find its
				// key so the error names it and validation goes on.
				if key, msg, found := badDuration(raw); found && len(typeKeys) < maxTypeErrors {
					line := lineFor(keyLines(doc), key)
					if next, ok := blankKeyValueAt(doc, line); ok && line > 0 {
						errs = append(errs, &Error{File: shown, Line: line, Key: key, Msg: msg})
						typeKeys = append(typeKeys, key)
						doc = next
						continue
					}
				}
				return nil, append(errs, tomlError(err, shown))
			}
			errs = append(errs, tomlError(err, shown))
			if len(typeKeys) >= maxTypeErrors {
				return nil, errs
			}
			line, _ := de.Position()
			next, ok := blankKeyValueAt(doc, line)
			if !ok {
				return nil, errs
			}
			typeKeys = append(typeKeys, keyPath(de.Key()))
			doc = next
		}
	}
	c.Path = file
	resolvePaths(c)
	semantic := validate(c, shown)
	if file != "" {
		semantic = withLines(semantic, data)
	}
	for _, e := range semantic {
		// A value already reported as wrong-typed was left at its default;
		// do not report it twice.
		if !underAny(e.(*Error).Key, typeKeys) {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return c, errs
	}
	return c, nil
}

// blankKeyValueAt returns doc with the top-level key = value expression
// covering line replaced by spaces (newlines kept, so every other line keeps
// its number). ok is false when no key = value covers line (a table header).
func blankKeyValueAt(doc []byte, line int) ([]byte, bool) {
	var p unstable.Parser
	p.Reset(doc)
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind != unstable.KeyValue {
			continue
		}
		sh := p.Shape(e.Raw)
		if line < sh.Start.Line || line > sh.End.Line {
			continue
		}
		out := bytes.Clone(doc)
		for i := sh.Start.Offset; i < sh.End.Offset; i++ {
			if out[i] != '\n' {
				out[i] = ' '
			}
		}
		return out, true
	}
	return nil, false
}

// underAny reports whether key is one of keys or lies beneath one of them.
func underAny(key string, keys []string) bool {
	for _, k := range keys {
		if key == k || strings.HasPrefix(key, k+".") || strings.HasPrefix(key, k+"[") {
			return true
		}
	}
	return false
}

// withLines adds the line of each error's key in data where it is written.
func withLines(errs []error, data []byte) []error {
	lines := keyLines(data)
	for _, e := range errs {
		if ce, ok := e.(*Error); ok && ce.Line == 0 && ce.Key != "" {
			ce.Line = lineFor(lines, ce.Key)
		}
	}
	return errs
}

func resetSetCollections(c *Config, raw map[string]any) {
	if network, ok := raw["network"].(map[string]any); ok {
		if _, ok := network["domains"]; ok {
			c.Network.Domains = nil
		}
		if _, ok := network["domain_files"]; ok {
			c.Network.DomainFiles = nil
		}
	}
	if dns, ok := raw["dns"].(map[string]any); ok {
		if _, ok := dns["hosts"]; ok {
			c.DNS.Hosts = nil
		}
		if _, ok := dns["servers"]; ok {
			c.DNS.Servers = nil
		}
	}
	if ap, ok := raw["approvals"].(map[string]any); ok {
		if _, ok := ap["hooks"]; ok {
			c.Approvals.Hooks = nil
		}
	}
}

func tomlError(err error, file string) error {
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, col := de.Position()
		msg := friendlyTypeError(strings.TrimPrefix(de.Error(), "toml: "))
		return &Error{File: file, Line: line, Column: col, Key: keyPath(de.Key()), Msg: msg + hintFor(de.Key())}
	}
	return &Error{File: file, Msg: err.Error()}
}

func unknownKeyError(de *toml.DecodeError, file string) error {
	line, _ := de.Position()
	key := de.Key()
	what := "unknown key"
	if strings.Contains(de.Error(), "missing table") {
		what = "unknown table"
	}
	parent := "the top level"
	if len(key) > 1 {
		parent = "[" + keyPath(key[:len(key)-1]) + "]"
	}
	return &Error{File: file, Line: line, Key: keyPath(key),
		Msg: fmt.Sprintf("%s %q in %s; remove it or fix its spelling (the keys are those of configs/default.toml)", what, key[len(key)-1], parent)}
}

var typeErr = regexp.MustCompile(`^cannot decode TOML (\w+) into (?:struct field )?\S+ of type (\S+)$|^cannot decode TOML (\w+) into (\S+)$`)

// friendlyTypeError rewrites go-toml's Go-centric type errors ("into struct
// field config.Network.AllowLocalBinding of type bool") in TOML terms.
func friendlyTypeError(msg string) string {
	m := typeErr.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	got, want := m[1], m[2]
	if got == "" {
		got, want = m[3], m[4]
	}
	names := map[string]string{"bool": "a boolean (true or false)", "string": "a string", "int": "an integer",
		"[]string": "a list of strings", "map[string]string": "a table of strings", "[]config.DomainFile": "an array of tables",
		"[]config.Hook": "an array of tables", "[]config.Credential": "an array of tables", "map[string][]string": "a table of string lists"}
	if n, ok := names[want]; ok {
		want = n
	}
	return fmt.Sprintf("wrong type: want %s, got a TOML %s", want, got)
}

// hintFor adds what to write for keys whose type people get wrong.
func hintFor(key []string) string {
	p := keyPath(key)
	switch {
	case strings.HasSuffix(p, "timeout") || strings.HasSuffix(p, "_timeout"):
		return `; write a duration string such as "2s" or "5m"`
	case strings.HasPrefix(p, "network.domains."):
		return `; write "allow" or "deny"`
	case strings.HasPrefix(p, "dns.hosts."):
		return `; write a list of IP addresses such as ["10.0.0.1"]`
	}
	return ""
}

// keyPath renders a TOML key as written: bare parts plain, others quoted.
func keyPath(parts []string) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		if isBareKey(p) {
			out[i] = p
		} else {
			out[i] = strconv.Quote(p)
		}
	}
	return strings.Join(out, ".")
}

func isBareKey(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// HomeDir returns $NETPROXY_HOME, defaulting to ~/.netproxy.
func HomeDir() string {
	if h := os.Getenv("NETPROXY_HOME"); h != "" {
		return expandTilde(h)
	}
	return filepath.Join(userHome(), ".netproxy")
}

func userHome() string {
	if h := os.Getenv("HOME"); h != "" {
		return h
	}
	if h, err := os.UserHomeDir(); err == nil {
		return h
	}
	return "/"
}

func expandTilde(p string) string {
	if p == "~" {
		return userHome()
	}
	if strings.HasPrefix(p, "~/") {
		return filepath.Join(userHome(), p[2:])
	}
	return p
}

// ExpandPath expands a leading $NETPROXY_HOME (or ${NETPROXY_HOME}) and ~,
// and resolves a relative path against base (the config file's folder; the
// working directory when base is "").
func ExpandPath(p, base string) string {
	if p == "" {
		return ""
	}
	for _, v := range []string{"$NETPROXY_HOME", "${NETPROXY_HOME}"} {
		if p == v || strings.HasPrefix(p, v+"/") {
			p = HomeDir() + p[len(v):]
			break
		}
	}
	p = expandTilde(p)
	if !filepath.IsAbs(p) && base != "" {
		p = filepath.Join(base, p)
	}
	return filepath.Clean(p)
}

func resolvePaths(c *Config) {
	base := ""
	if c.Path != "" {
		base = filepath.Dir(c.Path)
	}
	c.Control.Socket = ExpandPath(c.Control.Socket, base)
	c.Audit.Path = ExpandPath(c.Audit.Path, base)
	c.Guardian.Script = ExpandPath(c.Guardian.Script, base)
	for _, p := range []*string{&c.MITM.CACert, &c.MITM.CAKey, &c.MITM.UpstreamCA} {
		if *p != "" {
			*p = ExpandPath(*p, base)
		}
	}
	for i := range c.Credentials {
		c.Credentials[i].SecretFile = ExpandPath(c.Credentials[i].SecretFile, base)
	}
	for i := range c.ProxyAuth.Clients {
		if f := &c.ProxyAuth.Clients[i].SecretFile; *f != "" {
			*f = ExpandPath(*f, base)
		}
	}
	for i := range c.Network.DomainFiles {
		c.Network.DomainFiles[i].Path = ExpandPath(c.Network.DomainFiles[i].Path, base)
	}
	if c.Shadow.Config != "" {
		c.Shadow.Config = ExpandPath(c.Shadow.Config, base)
	}
	c.Cluster.KeyFile = ExpandPath(c.Cluster.KeyFile, base)
	for _, f := range []*string{&c.Cluster.TLSCAFile, &c.Cluster.TLSCertFile, &c.Cluster.TLSKeyFile} {
		*f = ExpandPath(*f, base)
	}
}

// validate checks every value; each error names its key.
func validate(c *Config, file string) []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, &Error{File: file, Key: key, Msg: fmt.Sprintf(format, a...)})
	}

	checkAddr := func(key, v string, required bool) {
		if v == "" {
			if required {
				bad(key, `missing; write "host:port" such as "127.0.0.1:3128"`)
			}
			return
		}
		h, port, err := net.SplitHostPort(v)
		if err != nil {
			bad(key, `%q is not "host:port": %v`, v, err)
			return
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			bad(key, "%q: port must be a number 0–65535", v)
		}
		if h != "" && h != "localhost" {
			if _, err := netip.ParseAddr(h); err != nil {
				bad(key, "%q: host must be an IP address or localhost", v)
			}
		}
	}
	checkAddr("listen.http", c.Listen.HTTP, true)
	checkAddr("listen.socks5", c.Listen.SOCKS5, true)
	checkAddr("listen.admin", c.Listen.Admin, true)
	if c.Control.Socket == "" {
		bad("control.socket", "missing; give the path of the control unix socket")
	}

	switch c.Network.Mode {
	case "full", "limited":
	default:
		bad("network.mode", `%q is not "full" or "limited"`, c.Network.Mode)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Network.Domains)) {
		// hostpolicy owns what an entry is (patterns, IP literals, CIDRs).
		if err := hostpolicy.CheckEntry(k, c.Network.Domains[k]); err != nil {
			bad("network.domains."+strconv.Quote(k), "%v", err)
		}
	}
	for i, df := range c.Network.DomainFiles {
		key := fmt.Sprintf("network.domain_files[%d]", i)
		if df.Path == "" {
			bad(key+".path", "missing; give the file of patterns (one per line)")
		}
		if df.Decision != "allow" && df.Decision != "deny" {
			bad(key+".decision", `%q is not "allow" or "deny"`, df.Decision)
		}
	}
	if u := c.Network.UpstreamProxy; u != "" && !strings.HasPrefix(u, "http://") {
		bad("network.upstream_proxy", `%q: only http:// parent proxies are supported`, u)
	}

	if c.DNS.Timeout.Duration <= 0 {
		bad("dns.timeout", `must be a positive duration such as "2s"`)
	}
	for i, s := range c.DNS.Servers {
		if err := hostpolicy.CheckDNSServer(s); err != nil {
			bad(fmt.Sprintf("dns.servers[%d]", i), "%v", err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.DNS.Hosts)) {
		key := "dns.hosts." + strconv.Quote(k)
		if n, err := hostname.Normalize(k); err != nil {
			bad(key, "not a valid host name: %v", err)
		} else if _, err := netip.ParseAddr(n); err == nil {
			bad(key, "an IP address needs no static answer")
		}
		if len(c.DNS.Hosts[k]) == 0 {
			bad(key, "empty list; give at least one IP address")
		}
		for i, a := range c.DNS.Hosts[k] {
			if _, err := netip.ParseAddr(a); err != nil {
				bad(fmt.Sprintf("%s[%d]", key, i), "%q is not an IP address", a)
			}
		}
	}

	for _, e := range c.Approvals.Settings().Validate() {
		bad("approvals."+e.Key, "%s", e.Msg)
	}
	for _, e := range c.Cluster.Settings().Validate() {
		bad("cluster."+e.Key, "%s", e.Msg)
	}
	for i, h := range c.Admin.AllowedHosts {
		if err := admin.CheckAllowedHost(h); err != nil {
			bad(fmt.Sprintf("admin.allowed_hosts[%d]", i), "%v", err)
		}
	}

	switch c.Guardian.Backend {
	case "starlark", "webhook", "openai":
	default:
		bad("guardian.backend", `%q is not "starlark", "webhook" or "openai"`, c.Guardian.Backend)
	}
	if c.Approvals.Reviewer == "guardian" {
		switch c.Guardian.Backend {
		case "starlark":
			if c.Guardian.Script == "" {
				bad("guardian.script", "missing; the starlark backend needs a script defining review(request)")
			}
		case "webhook", "openai":
			if c.Guardian.URL == "" {
				bad("guardian.url", "missing; the %s backend needs a URL", c.Guardian.Backend)
			} else if !strings.HasPrefix(c.Guardian.URL, "http://") && !strings.HasPrefix(c.Guardian.URL, "https://") {
				bad("guardian.url", "%q is not an http(s) URL", c.Guardian.URL)
			}
			if c.Guardian.Backend == "openai" && c.Guardian.Model == "" {
				bad("guardian.model", "missing; the openai backend needs a model name")
			}
		}
	}
	if c.Guardian.Timeout.Duration <= 0 {
		bad("guardian.timeout", `must be a positive duration such as "10s"`)
	}

	errs = append(errs, validateCredentials(c, file)...)
	errs = append(errs, validateProxyAuth(c, file)...)
	errs = append(errs, validateRequests(c, file)...)
	if c.Admin.TokenEnv == "" {
		bad("admin.token_env", "missing; name the environment variable holding the admin bearer token")
	}
	if c.Audit.BufferSize < 0 {
		bad("audit.buffer_size", "must not be negative")
	}
	if c.Limits.MaxConnections <= 0 {
		bad("limits.max_connections", "must be positive")
	}
	if c.Limits.MaxHeaderBytes <= 0 {
		bad("limits.max_header_bytes", "must be positive")
	}
	if c.Limits.MaxHeaders <= 0 {
		bad("limits.max_headers", "must be positive")
	}
	for key, d := range map[string]Duration{
		"limits.header_timeout": c.Limits.HeaderTimeout, "limits.idle_timeout": c.Limits.IdleTimeout,
		"limits.connect_timeout": c.Limits.ConnectTimeout,
	} {
		if d.Duration <= 0 {
			bad(key, `must be a positive duration such as "10s"`)
		}
	}
	errs = append(errs, validateMITM(c, file)...)
	errs = append(errs, validateBudgets(c, file)...)
	if c.Shadow.Config != "" && c.Path != "" && filepath.Clean(c.Shadow.Config) == filepath.Clean(c.Path) {
		bad("shadow.config", "names this configuration file itself; give the candidate file")
	}
	if c.Metrics.MaxHostLabels < 0 {
		bad("metrics.max_host_labels", "must not be negative")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", `%q is not debug, info, warn or error`, c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format", `%q is not "text" or "json"`, c.Log.Format)
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].(*Error).Key < errs[j].(*Error).Key })
	return errs
}

// validateMITM checks [mitm]: when enabled, the CA certificate and key must
// be readable PEM and belong together; upstream_ca, when set, must hold at
// least one PEM certificate.
func validateMITM(c *Config, file string) []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, &Error{File: file, Key: key, Msg: fmt.Sprintf(format, a...)})
	}
	if c.MITM.UpstreamCA != "" {
		pem, err := os.ReadFile(c.MITM.UpstreamCA)
		if err != nil {
			bad("mitm.upstream_ca", "cannot read %s: %v", c.MITM.UpstreamCA, err)
		} else if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			bad("mitm.upstream_ca", "%s holds no PEM certificate", c.MITM.UpstreamCA)
		}
	}
	if !c.MITM.Enabled {
		return errs
	}
	certPEM, certErr := readMITMFile(c.MITM.CACert)
	if certErr != nil {
		bad("mitm.ca_cert", "%v; enabled = true needs the CA certificate (PEM)", certErr)
	}
	keyPEM, keyErr := readMITMFile(c.MITM.CAKey)
	if keyErr != nil {
		bad("mitm.ca_key", "%v; enabled = true needs the CA private key (PEM)", keyErr)
	}
	if certErr != nil || keyErr != nil {
		return errs
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		bad("mitm.ca_key", "does not match mitm.ca_cert (%s): %v", c.MITM.CACert, err)
		return errs
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || !leaf.IsCA {
		bad("mitm.ca_cert", "%s is not a CA certificate (basic constraints CA:TRUE needed)", c.MITM.CACert)
	}
	return errs
}

// validateCredentials checks each [[credentials]] entry's shape (the
// credentials package owns what is valid), that no host pattern is claimed
// twice for one header, and that [mitm] is on: HTTPS toward a credential's
// hosts must be intercepted to inject the secret. Secrets are read by
// serve and reload, not here.
func validateCredentials(c *Config, file string) []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, &Error{File: file, Key: key, Msg: fmt.Sprintf(format, a...)})
	}
	specs := c.CredentialSpecs()
	for i, s := range specs {
		for _, ke := range s.Check() {
			bad(fmt.Sprintf("credentials[%d].%s", i, ke.Key), "%s", ke.Msg)
		}
	}
	for _, cf := range credentials.Conflicts(specs) {
		if cf.HostIndex < 0 {
			bad(fmt.Sprintf("credentials[%d].name", cf.Second), "%q is already the name of credentials[%d]", cf.Pattern, cf.First)
			continue
		}
		bad(fmt.Sprintf("credentials[%d].hosts[%d]", cf.Second, cf.HostIndex),
			"%q is already claimed for header %s by credentials[%d] (%s); one host pattern, one credential per header",
			cf.Pattern, cf.Header, cf.First, specs[cf.First].Name)
	}
	if len(specs) > 0 && !c.MITM.Enabled {
		bad("credentials", "[mitm] enabled = true is needed: netproxy injects secrets into HTTPS only by intercepting it with its CA (docs/credentials.md)")
	}
	return errs
}

// validateRequests checks each [[network.requests]] rule (hostpolicy owns
// what is valid) and that [mitm] is on: a rule host's HTTPS is judged only
// by intercepting it.
func validateRequests(c *Config, file string) []error {
	var errs []error
	for _, r := range c.RequestRules() {
		for _, ke := range hostpolicy.CheckRequestRule(r) {
			errs = append(errs, &Error{File: file, Key: ke.Key, Msg: ke.Msg})
		}
	}
	if len(c.Network.Requests) > 0 && !c.MITM.Enabled {
		errs = append(errs, &Error{File: file, Key: "network.requests[0]", Msg: "[mitm] enabled = true is needed: request rules judge HTTPS requests only by intercepting them with netproxy's CA (docs/policy.md, request rules)"})
	}
	return errs
}

func readMITMFile(path string) ([]byte, error) {
	if path == "" {
		return nil, errors.New("missing")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", path, err)
	}
	return b, nil
}

// validateDomainFiles reads every domain file and parses each line, so that
// `netproxy config validate` reports unreadable files and bad patterns.
func validateDomainFiles(c *Config) []error {
	var errs []error
	for i, df := range c.Network.DomainFiles {
		if df.Path == "" {
			continue
		}
		if f, err := os.Open(df.Path); err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			errs = append(errs, &Error{File: c.Path, Key: fmt.Sprintf("network.domain_files[%d].path", i),
				Msg: fmt.Sprintf("cannot read domain file %s: %v", df.Path, err)})
			continue
		} else {
			f.Close()
		}
		if df.Decision != hostpolicy.EntryAllow && df.Decision != hostpolicy.EntryDeny {
			continue // reported by validate under its key
		}
		errs = append(errs, hostpolicy.CheckDomainFile(df.Path, df.Decision)...)
	}
	return errs
}

// AdminTokenFile is where `netproxy serve` writes a generated admin token,
// in $NETPROXY_HOME (SPEC §7.3).
const AdminTokenFile = "admin-token"

// HomeSecretPaths are $NETPROXY_HOME and, by name, the secrets usually in
// it (the admin token, the rules): what a sandbox must never read (SPEC
// §6.5). The names matter when the folder cannot be hidden whole (a
// workspace inside it).
func HomeSecretPaths(home string) []string {
	return []string{home, filepath.Join(home, AdminTokenFile), filepath.Join(home, "rules")}
}
