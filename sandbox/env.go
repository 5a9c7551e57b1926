package sandbox

import (
	"sort"
	"strings"
)

// httpProxyKeys receive the HTTP proxy URL (reference codex-network-proxy.md
// §1.7); both cases are set because curl ignores upper-case HTTP_PROXY.
var httpProxyKeys = []string{
	"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
	"YARN_HTTP_PROXY", "YARN_HTTPS_PROXY",
	"npm_config_http_proxy", "npm_config_https_proxy", "npm_config_proxy",
	"NPM_CONFIG_HTTP_PROXY", "NPM_CONFIG_HTTPS_PROXY", "NPM_CONFIG_PROXY",
	"BUNDLE_HTTP_PROXY", "BUNDLE_HTTPS_PROXY", "PIP_PROXY",
	"DOCKER_HTTP_PROXY", "DOCKER_HTTPS_PROXY",
	"WS_PROXY", "WSS_PROXY", "ws_proxy", "wss_proxy",
}

var noProxyKeys = []string{"NO_PROXY", "no_proxy", "npm_config_noproxy", "NPM_CONFIG_NOPROXY", "YARN_NO_PROXY", "BUNDLE_NO_PROXY"}

var socksProxyKeys = []string{"ALL_PROXY", "all_proxy", "FTP_PROXY", "ftp_proxy"}

// noProxyValue keeps loopback direct: inside the sandbox loopback is the
// sandbox's own, so nothing leaks by talking to it.
const noProxyValue = "localhost,127.0.0.1,::1"

// ProxyEnv returns env with every proxy variable removed (case-insensitive
// key match) and replaced by the in-sandbox endpoints. socksAddr may be "":
// then ALL_PROXY gets the HTTP URL.
func ProxyEnv(env []string, httpAddr, socksAddr string) []string {
	out := StripProxyEnv(env)
	set := map[string]string{}
	for _, k := range httpProxyKeys {
		set[k] = "http://" + httpAddr
	}
	for _, k := range noProxyKeys {
		set[k] = noProxyValue
	}
	for _, k := range socksProxyKeys {
		if socksAddr != "" {
			set[k] = "socks5h://" + socksAddr
		} else {
			set[k] = "http://" + httpAddr
		}
	}
	set["ELECTRON_GET_USE_PROXY"] = "true"
	set["NODE_USE_ENV_PROXY"] = "1"
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+set[k])
	}
	return out
}

// StripProxyEnv removes every proxy variable ProxyEnv would set, matched
// case-insensitively (escalated runs must not inherit a sandbox proxy).
func StripProxyEnv(env []string) []string {
	drop := map[string]bool{"ELECTRON_GET_USE_PROXY": true, "NODE_USE_ENV_PROXY": true}
	for _, group := range [][]string{httpProxyKeys, noProxyKeys, socksProxyKeys} {
		for _, k := range group {
			drop[strings.ToUpper(k)] = true
		}
	}
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[strings.ToUpper(k)] {
			out = append(out, kv)
		}
	}
	return out
}

// SetEnv returns env with key set to value (replacing an existing entry).
func SetEnv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != key {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}
