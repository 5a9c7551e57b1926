package config

import "github.com/netproxy/netproxy/credentials"

// Credential is one [[credentials]] entry: a secret netproxy injects into
// Header on requests to Hosts, in place of the per-execution placeholder
// the sandbox holds (docs/credentials.md). secret_file is relative to the
// config file's folder and re-read on reload.
type Credential struct {
	Name              string   `toml:"name"`
	Hosts             []string `toml:"hosts"`
	Header            string   `toml:"header"`
	Format            string   `toml:"format"`
	SecretEnv         string   `toml:"secret_env"`
	SecretFile        string   `toml:"secret_file"`
	Env               string   `toml:"env"`
	PlaceholderPrefix string   `toml:"placeholder_prefix"`
	PlaceholderLength int      `toml:"placeholder_length"`
}

// CredentialSpecs maps [[credentials]] onto the broker's own spec type;
// the credentials package checks them and reads the secrets.
func (c *Config) CredentialSpecs() []credentials.Spec {
	out := make([]credentials.Spec, len(c.Credentials))
	for i, e := range c.Credentials {
		out[i] = credentials.Spec{
			Name: e.Name, Hosts: append([]string(nil), e.Hosts...), Header: e.Header, Format: e.Format,
			SecretEnv: e.SecretEnv, SecretFile: e.SecretFile, Env: e.Env,
			PlaceholderPrefix: e.PlaceholderPrefix, PlaceholderLength: e.PlaceholderLength,
		}
	}
	return out
}
