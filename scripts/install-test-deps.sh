#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine, only when missing.
# Runs as root in CI; as a non-root user it only reports what is missing.
set -euo pipefail

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
