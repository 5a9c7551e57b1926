#!/usr/bin/env bash
# make cluster-demo: Redis, three netproxy replicas sharing a generated
# cluster key, and HAProxy in front of them (TCP, round-robin), all on
# 127.0.0.1, in a temporary folder. Prints how to use it; Ctrl-C stops
# everything and removes the folder (CLUSTER_DEMO_KEEP=1 keeps it).
#
# Needs bin/netproxy (make build), redis-server and haproxy
# (scripts/install-test-deps.sh). Ports: CLUSTER_DEMO_PORT_BASE (default
# 13100) + 28 (HTTP proxy), + 80 (SOCKS5), + 91 (admin / approvals page) on
# the balancer; + 1..3, 11..13, 21..23 the replicas; + 79 Redis.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
netproxy=${NETPROXY:-$root/bin/netproxy}
base=${CLUSTER_DEMO_PORT_BASE:-13100}
haproxy=$(command -v haproxy || echo /usr/sbin/haproxy)
for tool in "$netproxy" "$haproxy" "$(command -v redis-server || true)"; do
	if [ -z "$tool" ] || [ ! -x "$tool" ]; then
		echo "cluster-demo: missing ${tool:-redis-server}; run make build and scripts/install-test-deps.sh" >&2
		exit 1
	fi
done

dir=$(mktemp -d /tmp/netproxy-cluster-demo.XXXXXX)
pids=()
cleanup() {
	trap - INT TERM EXIT
	echo
	echo "cluster-demo: stopping"
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ "${CLUSTER_DEMO_KEEP:-}" = 1 ]; then
		echo "cluster-demo: logs and configs kept in $dir"
	else
		rm -rf "$dir"
	fi
	echo "cluster-demo: stopped"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

lb_http=127.0.0.1:$((base + 28))
lb_socks=127.0.0.1:$((base + 80))
lb_admin=127.0.0.1:$((base + 91))
redis_port=$((base + 79))
head -c 32 /dev/urandom >"$dir/cluster.key"
chmod 600 "$dir/cluster.key"
NETPROXY_ADMIN_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export NETPROXY_ADMIN_TOKEN

mkdir -p "$dir/redis"
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$dir/redis" --appendonly yes --save "" \
	--protected-mode no --daemonize no --logfile "$dir/redis/redis.log" &
pids+=($!)
for _ in $(seq 100); do
	redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
	sleep 0.1
done

nodes=(node-a node-b node-c)
servers_http="" servers_socks="" servers_admin=""
for i in 0 1 2; do
	n=${nodes[i]}
	p=$((base + 1 + 10 * i))
	mkdir -p "$dir/$n/home"
	cat >"$dir/$n/netproxy.toml" <<EOF
[listen]
http = "127.0.0.1:$p"
socks5 = "127.0.0.1:$((p + 1))"
admin = "127.0.0.1:$((p + 2))"

[control]
socket = "$dir/$n/control.sock"

[admin]
token_env = "NETPROXY_ADMIN_TOKEN"

[audit]
path = "$dir/$n/audit.jsonl"

[network.domains]
"example.com" = "allow"
"*.example.com" = "allow"
"blocked.example" = "deny"

[approvals]
enabled = true
reviewer = "user"
policy = "on-request"
timeout = "120s"

[cluster]
redis = "redis://127.0.0.1:$redis_port/0"
node_id = "$n"
key_prefix = "demo:"
key_file = "$dir/cluster.key"
advertise_http = "$lb_http"
advertise_socks5 = "$lb_socks"
EOF
	NETPROXY_HOME=$dir/$n/home "$netproxy" serve --config "$dir/$n/netproxy.toml" >"$dir/$n/netproxy.log" 2>&1 &
	pids+=($!)
	servers_http+="    server $n 127.0.0.1:$p"$'\n'
	servers_socks+="    server $n 127.0.0.1:$((p + 1))"$'\n'
	servers_admin+="    server $n 127.0.0.1:$((p + 2))"$'\n'
done
for i in 0 1 2; do
	n=${nodes[i]}
	ok=
	for _ in $(seq 100); do
		if curl -fsS -o /dev/null "http://127.0.0.1:$((base + 3 + 10 * i))/healthz" 2>/dev/null; then
			ok=1
			break
		fi
		sleep 0.1
	done
	if [ -z "$ok" ]; then
		echo "cluster-demo: $n did not start:" >&2
		cat "$dir/$n/netproxy.log" >&2
		exit 1
	fi
done

cat >"$dir/haproxy.cfg" <<EOF
global
    maxconn 4096
    stats socket $dir/haproxy.sock mode 600

defaults
    mode tcp
    timeout connect 2s
    timeout client 5m
    timeout server 5m

frontend http
    bind $lb_http
    default_backend http
backend http
    balance roundrobin
$servers_http
frontend socks5
    bind $lb_socks
    default_backend socks5
backend socks5
    balance roundrobin
$servers_socks
frontend admin
    bind $lb_admin
    default_backend admin
backend admin
    balance roundrobin
$servers_admin
EOF
"$haproxy" -db -f "$dir/haproxy.cfg" >"$dir/haproxy.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
	[ -S "$dir/haproxy.sock" ] && break
	sleep 0.1
done
if [ ! -S "$dir/haproxy.sock" ]; then
	echo "cluster-demo: haproxy did not start:" >&2
	cat "$dir/haproxy.log" >&2
	exit 1
fi

cat <<EOF
cluster-demo: ready — Redis 127.0.0.1:$redis_port, replicas node-a/b/c, HAProxy in front (round-robin)
  folder:          $dir (configs, logs, audit per replica)
  HTTP proxy (LB): $lb_http      SOCKS5 (LB): $lb_socks
  approvals page:  http://$lb_admin/login?token=$NETPROXY_ADMIN_TOKEN   (any replica answers)

Try:
  curl -x http://$lb_http https://example.com/            # allowed on every replica
  curl -x http://$lb_http http://blocked.example/         # 403, denied by the list
  curl -x http://$lb_http https://www.wikipedia.org/      # unlisted: waits for a review on the page
  NETPROXY_ADMIN_TOKEN=$NETPROXY_ADMIN_TOKEN $netproxy approvals list --admin http://$lb_admin
  $netproxy cluster status --config $dir/node-a/netproxy.toml
  $root/bin/execwrap run --control $dir/node-b/control.sock -- sh -c 'for i in 1 2 3; do curl -sI https://example.com | head -1; done'
    (registers on node-b; its connections go through the balancer to all three replicas)

Ctrl-C stops everything.
EOF
wait "${pids[@]}"
