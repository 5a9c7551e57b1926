#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine, only when missing.
# Runs as root in CI; as a non-root user it only reports what is missing.
#
# --bench-peers: instead, install only what `make bench-peers` needs (Squid built with
# OpenSSL for ssl-bump, Dante's server, wrk, mitmproxy, taskset), without leaving Squid's
# or Dante's system services running or enabled: the bench starts its own instances with
# its own configurations.
set -euo pipefail

if [ "${1:-}" = "--bench-peers" ]; then
	need=()
	# The interception part bumps TLS: Debian's squid-openssl (it replaces squid).
	{ command -v squid >/dev/null 2>&1 && squid -v 2>/dev/null | grep -q -- --with-openssl; } || need+=(squid-openssl)
	command -v mitmdump >/dev/null 2>&1 || need+=(mitmproxy)
	command -v danted >/dev/null 2>&1 || need+=(dante-server)
	command -v wrk >/dev/null 2>&1 || need+=(wrk)
	command -v taskset >/dev/null 2>&1 || need+=(util-linux)
	if [ ${#need[@]} -eq 0 ]; then
		exit 0
	fi
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-test-deps: missing ${need[*]} (run as root to install)" >&2
		exit 1
	fi
	echo "install-test-deps: installing ${need[*]} for the peer bench"
	export DEBIAN_FRONTEND=noninteractive
	# Keep the packages' maintainer scripts from starting their services:
	# a policy-rc.d that refuses every start, for the length of the install
	# (unless the machine already has one of its own).
	policy=/usr/sbin/policy-rc.d
	own_policy=
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 0755 "$policy"
		own_policy=1
	fi
	status=0
	{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; } || status=$?
	if [ -n "$own_policy" ]; then
		rm -f "$policy"
	fi
	# Whatever started anyway, stop it, and keep it from starting at boot.
	for svc in squid danted; do
		if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
			systemctl disable --now "$svc" >/dev/null 2>&1 || true
		elif [ -x "/etc/init.d/$svc" ]; then
			"/etc/init.d/$svc" stop >/dev/null 2>&1 || true
			command -v update-rc.d >/dev/null 2>&1 && update-rc.d "$svc" disable >/dev/null 2>&1 || true
		fi
	done
	exit $status
fi

need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v wrk >/dev/null 2>&1 || need+=(wrk) # make bench: the HTTP load generator
command -v redis-server >/dev/null 2>&1 || need+=(redis-server) # cluster mode tests (test/cluster_test.go)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need+=(haproxy) # replicas behind a load balancer (test/cluster_haproxy_test.go, make cluster-demo)
# sandbox escape probes (test/sandbox_escape_seccomp_test.go): C probes and the plant tools
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
[ -e /usr/include/stdio.h ] || need+=(libc6-dev)
command -v setcap >/dev/null 2>&1 || need+=(libcap2-bin)
[ -x /usr/bin/python3 ] || need+=(python3)
# real Python clients: pip (test/request_rules_pip_test.go, test/proxy_auth_test.go) and requests
/usr/bin/python3 -c 'import pip' >/dev/null 2>&1 || need+=(python3-pip)
/usr/bin/python3 -c 'import requests' >/dev/null 2>&1 || need+=(python3-requests)
# transparent capture (test/sandbox_capture_e2e_test.go): Debian's Node (20, ignores
# NODE_USE_ENV_PROXY), nc, git http-backend
[ -x /usr/bin/node ] || need+=(nodejs)
command -v nc >/dev/null 2>&1 || need+=(netcat-openbsd)
command -v git >/dev/null 2>&1 || need+=(git)

if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
# de-duplicate
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
if [ "$(id -u)" -ne 0 ]; then
	echo "install-test-deps: missing ${need[*]} (run as root to install)" >&2
	exit 1
fi
echo "install-test-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
