#!/usr/bin/env bash
# rsock and TCP at a shared bottleneck, printed as a markdown table (as
# root: it makes network namespaces).
#
# Two namespaces joined by a veth (offloads left as the kernel sets them,
# as on a real NIC: TSO, GSO and checksum offload on); the sender's egress
# is a token bucket, `tc qdisc add dev … root tbf rate RATE burst 64kb
# latency QUEUE`: a link of RATE with a queue of QUEUE. For each RATE and
# QUEUE, five cases, each DURATION long, one stream of 64 KiB writes per
# flow (rsockbench client -modes stream -sizes 64KiB -conns 1, flows
# started together):
#
#   TCP alone, rsock alone, TCP + rsock, two TCP, two rsock
#
# Columns: each flow's goodput (GB/s, 10^9 B/s, the server's count),
# the packets the bottleneck dropped (tc -s qdisc), rsock's share of the
# goodput (TCP + rsock only) and Jain's fairness index of the two flows.
#
# Settings (environment):
#   RATES=400mbit  QUEUES=5ms  DURATION=10s  MTU=1500
#   CASES=tcp,rsock,tcp+rsock,tcp+tcp,rsock+rsock
#   RSOCKBENCH=FILE (use this binary instead of building one)
#   LOGDIR=DIR (keep each client's output there)
#
# Namespaces are named bneck-<random>-a/-b and removed on exit (also on
# Ctrl-C); the rsockbench processes are ended by their PIDs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

if [ "$(id -u)" != 0 ]; then
	echo "bottleneck-bench: not root: cannot create network namespaces" >&2
	exit 1
fi
for tool in ip tc jq go; do
	if ! command -v "$tool" >/dev/null; then
		echo "bottleneck-bench: $tool is missing (apt-get install iproute2 jq; Go at /usr/local/go)" >&2
		exit 1
	fi
done

RATES="${RATES:-400mbit}"
QUEUES="${QUEUES:-5ms}"
DURATION="${DURATION:-10s}"
MTU="${MTU:-1500}"
CASES="${CASES:-tcp,rsock,tcp+rsock,tcp+tcp,rsock+rsock}"

tmp=$(mktemp -d)
prefix="bneck-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
A="$prefix-a"
B="$prefix-b"
pids=()
cleanup() {
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
	done
	for ns in "$A" "$B"; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do
			kill -KILL "$p" 2>/dev/null || true
		done
		ip netns del "$ns" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "bottleneck-bench: building rsockbench" >&2
if [ -n "${RSOCKBENCH:-}" ]; then cp "$RSOCKBENCH" "$tmp/rsockbench"; else go build -o "$tmp/rsockbench" ./cmd/rsockbench; fi
bench="$tmp/rsockbench"

ip netns add "$A"
ip netns add "$B"
ip link add veth-a netns "$A" type veth peer name veth-b netns "$B"
ip -n "$A" addr add 10.77.0.1/24 dev veth-a
ip -n "$B" addr add 10.77.0.2/24 dev veth-b
for ns in "$A" "$B"; do
	ip -n "$ns" link set lo up
done
ip -n "$A" link set veth-a mtu "$MTU" up
ip -n "$B" link set veth-b mtu "$MTU" up
# The ends know each other's MAC for good: no ARP at the bottleneck.
mac_a=$(ip -n "$A" -j link show veth-a | jq -r '.[0].address')
mac_b=$(ip -n "$B" -j link show veth-b | jq -r '.[0].address')
ip -n "$A" neigh replace 10.77.0.2 lladdr "$mac_b" dev veth-a nud permanent
ip -n "$B" neigh replace 10.77.0.1 lladdr "$mac_a" dev veth-b nud permanent

# bottleneck RATE QUEUE: a fresh token bucket on A's egress (counters at 0).
bottleneck() {
	tc -n "$A" qdisc del dev veth-a root 2>/dev/null || true
	tc -n "$A" qdisc add dev veth-a root tbf rate "$1" burst 64kb latency "$2"
}
drops() {
	tc -n "$A" -s -j qdisc show dev veth-a | jq '[.[] | select(.kind == "tbf") | .drops] | add'
}

port=18600
# flows CASE: runs the case's flows together; prints "transport gbps" per
# flow, in order.
flows() {
	local i=0 kinds=() servers=() clients=() files=()
	IFS=+ read -r -a kinds <<<"$1"
	for k in "${kinds[@]}"; do
		port=$((port + 2))
		ip netns exec "$B" "$bench" server -addr "10.77.0.2:$port" -sessions 1 >"$tmp/server$i.out" 2>&1 &
		servers+=($!)
		pids+=($!)
		i=$((i + 1))
	done
	for _ in $(seq 50); do
		local up=0
		for j in $(seq 0 $((i - 1))); do
			grep -q "rsockbench server: rsock on" "$tmp/server$j.out" && up=$((up + 1))
		done
		[ "$up" = "$i" ] && break
		sleep 0.2
	done
	i=0
	local p=$((port - 2 * ${#kinds[@]}))
	for k in "${kinds[@]}"; do
		p=$((p + 2))
		rm -f "$tmp/flow$i.json"
		ip netns exec "$A" "$bench" client -addr "10.77.0.2:$p" -transports "$k" -modes stream \
			-sizes 64KiB -conns 1 -duration "$DURATION" -json "$tmp/flow$i.json" >"$tmp/client$i.out" 2>&1 &
		clients+=($!)
		pids+=($!)
		files+=("$tmp/flow$i.json")
		i=$((i + 1))
	done
	for c in "${clients[@]}"; do wait "$c" || true; done
	if [ -n "${LOGDIR:-}" ]; then
		mkdir -p "$LOGDIR"
		for j in $(seq 0 $((i - 1))); do
			cp "$tmp/client$j.out" "$LOGDIR/$1-$j.client"
		done
	fi
	for s in "${servers[@]}"; do
		kill -TERM "$s" 2>/dev/null || true
		wait "$s" 2>/dev/null || true
	done
	i=0
	for f in "${files[@]}"; do
		if [ -s "$f" ]; then
			jq -r '"\(.conn_transport) \(.gbps)"' "$f" | head -1
		else
			echo "error 0"
			echo "bottleneck-bench: flow $i of $1 failed: $(tail -1 "$tmp/client$i.out")" >&2
		fi
		i=$((i + 1))
	done
}

echo "bottleneck-bench: $(uname -r), $(nproc) CPUs, MTU $MTU, $DURATION per case" >&2
echo "| rate | queue | case | goodput GB/s | drops at the bottleneck | rsock's share | Jain's index |"
echo "| --- | --- | --- | --- | ---: | ---: | ---: |"
IFS=, read -r -a rates <<<"$RATES"
IFS=, read -r -a queues <<<"$QUEUES"
IFS=, read -r -a cases <<<"$CASES"
for rate in "${rates[@]}"; do
	for queue in "${queues[@]}"; do
		for c in "${cases[@]}"; do
			echo "bottleneck-bench: $rate $queue $c" >&2
			bottleneck "$rate" "$queue"
			out=$(flows "$c")
			d=$(drops)
			# Pair each flow with what it ran on, and compute the share and Jain's index.
			row=$(echo "$out" | awk -v kinds="$c" '
				BEGIN { n = split(kinds, k, "+") }
				{ tr[NR] = $1; g[NR] = $2 + 0 }
				END {
					s = ""; sum = 0; sq = 0; rs = 0
					for (i = 1; i <= n; i++) {
						label = k[i]
						if (k[i] == "rsock" && tr[i] !~ /^rdma/) label = "rsock(" tr[i] ")"
						s = s (i > 1 ? ", " : "") label " " sprintf("%.4f", g[i])
						sum += g[i]; sq += g[i] * g[i]
						if (k[i] == "rsock") rs += g[i]
					}
					share = "-"; jain = "-"
					if (n == 2 && sum > 0) {
						jain = sprintf("%.3f", sum * sum / (2 * sq))
						if (kinds == "tcp+rsock") share = sprintf("%.2f", rs / sum)
					}
					printf "%s|%s|%s", s, share, jain
				}')
			IFS='|' read -r goodput share jain <<<"$row"
			echo "| $rate | $queue | $c | $goodput | $d | $share | $jain |"
		done
	done
done
