#!/usr/bin/env bash
# Runs the ExecStart command lines of the units by hand (no systemd needed),
# on a free Redis port in a temporary folder, and checks the cluster forms.
# usage: deploy/cluster/run-local.sh path/to/netproxy
set -euo pipefail
bin=${1:?usage: run-local.sh NETPROXY_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
mkdir -p "$tmp/redis"
sed -e "s|^port .*|port $port|" -e "s|^dir .*|dir $tmp/redis|" "$here/redis-netproxy.conf" > "$tmp/redis-netproxy.conf"
redis-server "$tmp/redis-netproxy.conf" --daemonize no >"$tmp/redis.log" 2>&1 & pids+=($!)
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
off=$((RANDOM % 1000 + 20000))
for name in a b c; do
	home="$tmp/home-$name"; mkdir -p "$home"
	sed -e "s|127.0.0.1:6379|127.0.0.1:$port|" \
	    -e "s|127.0.0.1:\([0-9]*\)\"|127.0.0.1:\$((\1+$off))\"|" "$here/$name.toml" > "$tmp/$name.toml.in"
	# shift the listener ports so the example does not clash with anything running
	python3 - "$tmp/$name.toml.in" "$tmp/$name.toml" <<'PY'
import re,sys
s=open(sys.argv[1]).read()
s=re.sub(r'127\.0\.0\.1:\$\(\((\d+)\+(\d+)\)\)', lambda m: "127.0.0.1:%d" % (int(m.group(1))+int(m.group(2))), s)
open(sys.argv[2],"w").write(s)
PY
	NETPROXY_HOME="$home" NETPROXY_ADMIN_TOKEN=example "$bin" serve --config "$tmp/$name.toml" >"$tmp/$name.log" 2>&1 & pids+=($!)
done
sleep 3
out=$(NETPROXY_HOME="$tmp/home-a" "$bin" cluster status --config "$tmp/a.toml")
echo "$out"
for name in a b c; do
	echo "$out" | grep -q "replica-$name .*yes" || { echo "replica-$name not alive"; cat "$tmp/$name.log"; exit 1; }
done
echo "run-local: three replicas and Redis formed a cluster"
