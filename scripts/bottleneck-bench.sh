#!/usr/bin/env bash
# rsock and TCP at a shared bottleneck, printed as a markdown table (as
# root: it makes network namespaces).
#
# TOPOLOGY=router (the default): sender -> router -> receiver, three
# namespaces joined by two veths, the bottleneck a token bucket on the
# router's egress toward the receiver, `tc qdisc add dev … root tbf rate
# RATE burst 64kb latency QUEUE`: a link of RATE with a queue of QUEUE.
# Offloads as on real NICs: the sender segments (its veth has TSO and UDP
# segmentation off, so the kernel's GSO cuts TCP and rsock's UDP batches
# into MTU frames as a NIC's TSO would put them on the wire); the router
# forwards frame by frame (no GRO), so the queue holds, counts and drops
# MTU frames, as a router's does. The receiver keeps its defaults.
#
# RPS=1 (the default) steers each veth's received packets to a CPU by
# flow hash (rps_cpus on every veth, all CPUs), as a NIC's RSS keeps a flow
# on one queue. Without it a veth hands a packet to the backlog of the CPU
# that sent it, so a sender whose thread moves between CPUs has its flow
# reordered at the router: at 1 Gbit/s with a 20 ms queue, 28% of rsock's
# packets arrived out of order (RPS=0, the first versions of this bench).
#
# tbf's queue holds RATE × QUEUE plus the burst (iproute2 sets its limit
# so), so a "2 ms" queue holds 2 ms plus 64 KiB: 7.2 ms at 100 Mbit/s,
# 3.3 ms at 400 Mbit/s, 2.5 ms at 1 Gbit/s (the progress line says).
#
# TOPOLOGY=direct: the first version of this bench, two namespaces joined
# by a veth with the kernel's offloads, the tbf on the sender's egress. Its
# queue holds GSO super-packets (up to 64 KiB) and counts a dropped one as
# one drop, so its drops are not frames and its queue is not a router's.
#
# For each RATE and QUEUE, five cases, each DURATION long, one stream of
# 64 KiB writes per flow (rsockbench client -modes stream -sizes 64KiB
# -conns 1, flows started together; rsock over the udp link,
# RSOCK_LINK=udp, since between hosts auto runs TCP there):
#
#   TCP alone, rsock alone, TCP + rsock, two TCP, two rsock
#
# Columns: each flow's goodput (GB/s, 10^9 B/s, the server's count),
# the packets the bottleneck dropped (tc -s qdisc), rsock's share of the
# goodput (TCP + rsock only; quic's in TCP + quic) and Jain's fairness
# index of the two flows.
#
# A case may name quic as a flow (CASES=tcp+quic): one QUIC stream of
# 64 KiB writes by bench/quicflow (quic-go: CUBIC, pacing, UDP GSO). It
# is the control for rsock's share: a well-kept user-space transport over
# UDP, beside the same TCP flow on the same machine. Its goodput is the
# client's bytes over the time until the server had read them all.
#
# ECN=1 puts a CE marker (cmd/ecnmark: a tc BPF program on the queue's
# device, at its egress before the tbf) in front of the bottleneck: a
# virtual queue at the tbf's rate, with its 64 KiB bucket, that marks
# ECN-capable packets CE while it is longer than ECN_K (default 1ms), and
# sets RSOCK_ECN=on for the rsock flows (ECN is off by default), so their
# packets are ECN-capable and react to the marks; this bench's TCP does
# not ask for ECN (net.ipv4.tcp_ecn stays the namespaces' default) and is
# not marked. The table's last column is the marker's count of packets it
# set CE on ("-" without ECN=1).
#
# Settings (environment):
#   RATES=400mbit  QUEUES=5ms  DURATION=10s  MTU=1500  TOPOLOGY=router  ECN=0  ECN_K=1ms  RPS=1
#   (A large queue at a fast link takes longer than 20 s to reach a steady
#   state: at 1 Gbit/s with a 20 ms queue two TCP flows split 0.32/0.68 in
#   one 20 s run at MTU 9000; where the slow starts ended sets the share.
#   DURATION=60s there.)
#   TCP_CC=cubic (the TCP flows' congestion control, rsockbench client
#   -tcp-cc: a namespace runs the host's default, which is not CUBIC
#   everywhere; this machine's was bbr, and every table before this
#   setting measured rsock against BBR)
#   CASES=tcp,rsock,tcp+rsock,tcp+tcp,rsock+rsock
#   RSOCKBENCH=FILE (use this binary instead of building one)
#   QUICFLOW=FILE (likewise for bench/quicflow, built only if a case names quic)
#   LOGDIR=DIR (keep each client's output there)
#   DIAG=1 (after each case, print to stderr the UDP buffer errors at the
#   sender and the receiver, both rsock ends' stats a second before the
#   end (rsockbench stat: cwnd, resends, spurious resends, timeouts), the
#   TCP flows' state at the sender at the same moment (ss -ti: cwnd, rtt,
#   retransmits, what limited them), the sender's TCP counters over the
#   case (nstat: recovery episodes, TcpExtTCPSackRecovery, to set beside
#   rsock's cong_events; retransmitted segments, timeouts, loss probes,
#   fast retransmits), every veth's drops (loss that is not the
#   bottleneck's) and, on the router topology, each protocol's packets
#   lost between the router and the receiver: nftables counters on both
#   sides, since tbf counts its drops but not whose (TCP is the TCP
#   flows', UDP the rsock or quic flows'))
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
TOPOLOGY="${TOPOLOGY:-router}"
ECN="${ECN:-0}"
ECN_K="${ECN_K:-1ms}"
RPS="${RPS:-1}"
TCP_CC="${TCP_CC:-cubic}"
case " $(sysctl -n net.ipv4.tcp_available_congestion_control) " in
*" $TCP_CC "*) ;;
*)
	if ! modprobe "tcp_$TCP_CC" 2>/dev/null; then
		echo "bottleneck-bench: TCP_CC=$TCP_CC: not available (net.ipv4.tcp_available_congestion_control: $(sysctl -n net.ipv4.tcp_available_congestion_control))" >&2
		exit 1
	fi
	;;
esac
case "$RPS" in
0 | 1) ;;
*)
	echo "bottleneck-bench: RPS=$RPS: 0 or 1" >&2
	exit 1
	;;
esac
export RSOCK_LINK="${RSOCK_LINK:-udp}"
case "$TOPOLOGY" in
router | direct) ;;
*)
	echo "bottleneck-bench: TOPOLOGY=$TOPOLOGY: router or direct" >&2
	exit 1
	;;
esac

tmp=$(mktemp -d)
prefix="bneck-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
A="$prefix-a"
B="$prefix-b"
R="$prefix-r"
pids=()
cleanup() {
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
	done
	for ns in "$A" "$B" "$R"; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do
			kill -KILL "$p" 2>/dev/null || true
		done
		ip netns del "$ns" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${RSOCKBENCH:-}" ]; then
	cp "$RSOCKBENCH" "$tmp/rsockbench"
else
	echo "bottleneck-bench: building rsockbench" >&2
	go build -o "$tmp/rsockbench" ./cmd/rsockbench
fi
bench="$tmp/rsockbench"
case ",$CASES," in
*quic*)
	if [ -n "${QUICFLOW:-}" ]; then
		cp "$QUICFLOW" "$tmp/quicflow"
	else
		echo "bottleneck-bench: building quicflow" >&2
		go build -o "$tmp/quicflow" ./bench/quicflow
	fi
	;;
esac
if [ "$ECN" = 1 ]; then
	echo "bottleneck-bench: building ecnmark" >&2
	go build -o "$tmp/ecnmark" ./cmd/ecnmark
	export RSOCK_ECN=on
fi

ip netns add "$A"
ip netns add "$B"
for ns in "$A" "$B"; do
	ip -n "$ns" link set lo up
done
# link NS1 DEV1 ADDR1 NS2 DEV2 ADDR2: a veth between two namespaces, at MTU,
# whose ends know each other's MAC for good (no ARP at the bottleneck).
link() {
	ip link add "$2" netns "$1" type veth peer name "$5" netns "$4"
	ip -n "$1" addr add "$3/24" dev "$2"
	ip -n "$4" addr add "$6/24" dev "$5"
	ip -n "$1" link set "$2" mtu "$MTU" up
	ip -n "$4" link set "$5" mtu "$MTU" up
	local mac1 mac2
	mac1=$(ip -n "$1" -j link show "$2" | jq -r '.[0].address')
	mac2=$(ip -n "$4" -j link show "$5" | jq -r '.[0].address')
	ip -n "$1" neigh replace "$6" lladdr "$mac2" dev "$2" nud permanent
	ip -n "$4" neigh replace "$3" lladdr "$mac1" dev "$5" nud permanent
}
if [ "$TOPOLOGY" = direct ]; then
	link "$A" veth-a 10.77.0.1 "$B" veth-b 10.77.0.2
	QNS="$A"
	QDEV=veth-a
	SERVER=10.77.0.2
else
	if ! command -v ethtool >/dev/null; then
		echo "bottleneck-bench: ethtool is missing (apt-get install ethtool)" >&2
		exit 1
	fi
	ip netns add "$R"
	ip -n "$R" link set lo up
	ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=1
	link "$A" veth-a 10.77.0.1 "$R" veth-ra 10.77.0.254
	link "$R" veth-rb 10.77.1.254 "$B" veth-b 10.77.1.2
	ip -n "$A" route add 10.77.1.0/24 via 10.77.0.254
	ip -n "$B" route add 10.77.0.0/24 via 10.77.1.254
	# The sender's frames leave at MTU size, as a NIC's TSO puts them on
	# the wire; the router forwards them one by one.
	ip netns exec "$A" ethtool -K veth-a tso off tx-udp-segmentation off >/dev/null 2>&1 || true
	for d in veth-ra veth-rb; do
		ip netns exec "$R" ethtool -K "$d" gro off tso off gso off tx-udp-segmentation off >/dev/null 2>&1 || true
	done
	QNS="$R"
	QDEV=veth-rb
	SERVER=10.77.1.2
fi
# rps NS DEV: steer DEV's received packets to a CPU by flow hash.
rps() {
	local q
	for q in $(ip netns exec "$1" sh -c "ls -d /sys/class/net/$2/queues/rx-*"); do
		ip netns exec "$1" sh -c "echo $rpsmask > $q/rps_cpus"
	done
}
if [ "$RPS" = 1 ]; then
	rpsmask=$(printf '%x' $(((1 << $(nproc)) - 1)))
	rps "$A" veth-a
	rps "$B" veth-b
	if [ "$TOPOLOGY" != direct ]; then
		rps "$R" veth-ra
		rps "$R" veth-rb
	fi
fi

# bottleneck RATE QUEUE: a fresh token bucket on the queue's device
# (counters at 0), and with ECN=1 a fresh marker in front of it.
marker=""
bottleneck() {
	tc -n "$QNS" qdisc del dev "$QDEV" root 2>/dev/null || true
	tc -n "$QNS" qdisc add dev "$QDEV" root tbf rate "$1" burst 64kb latency "$2"
	if [ "$ECN" = 1 ]; then
		rm -f "$tmp/marks.json"
		ip netns exec "$QNS" "$tmp/ecnmark" -dev "$QDEV" -rate "$1" -k "$ECN_K" -limit "$2" -burst 65536 \
			>"$tmp/marks.json" 2>"$tmp/ecnmark.err" &
		marker=$!
		pids+=("$marker")
		for _ in $(seq 50); do
			grep -q "marking on" "$tmp/ecnmark.err" && break
			if ! kill -0 "$marker" 2>/dev/null; then
				echo "bottleneck-bench: ecnmark failed: $(cat "$tmp/ecnmark.err")" >&2
				exit 1
			fi
			sleep 0.1
		done
	fi
}
# marks: stops the marker and sets m to how many packets it marked CE
# ("-" without ECN=1). Not in a subshell: it waits for the marker.
marks() {
	m="-"
	if [ -z "$marker" ]; then
		return
	fi
	kill -TERM "$marker" 2>/dev/null || true
	wait "$marker" 2>/dev/null || true
	marker=""
	m=$(jq -r '"\(.marked) of \(.ect) ECT"' "$tmp/marks.json" 2>/dev/null || echo "?")
}
# queue_ms RATE QUEUE: how long tbf's queue (RATE × QUEUE + 64 KiB) takes
# to drain at RATE, in ms.
queue_ms() {
	awk -v r="$1" -v q="$2" 'BEGIN {
		n = r + 0; u = tolower(substr(r, length(n "") + 1))
		if (u ~ /^g/) n *= 1e9; else if (u ~ /^m/) n *= 1e6; else if (u ~ /^k/) n *= 1e3
		t = q + 0; v = substr(q, length(t "") + 1)
		if (v == "s") t *= 1000; else if (v == "us") t /= 1000
		printf "%.1f", t + 65536 * 8 / n * 1000
	}'
}
drops() {
	tc -n "$QNS" -s -j qdisc show dev "$QDEV" | jq '[.[] | select(.kind == "tbf") | .drops] | add'
}

# flowcount_start: with DIAG=1 on the router topology, nftables counters
# of the packets toward the receiver by protocol (TCP, UDP: rsock), where
# the router forwards them (before the queue) and where the receiver takes
# them in (after it; its veth has no GRO, so these are frames). tbf counts
# its drops but not whose: the difference is each protocol's.
flowcount_on() { [ "$TOPOLOGY" != direct ] && command -v nft >/dev/null; }
flowcount_start() {
	flowcount_on || return 0
	local ns hook
	for ns in "$R" "$B"; do
		hook=forward
		[ "$ns" = "$B" ] && hook=prerouting
		ip netns exec "$ns" nft delete table inet bbdiag 2>/dev/null || true
		ip netns exec "$ns" nft -f - <<-EOT
			table inet bbdiag {
				counter to_tcp {}
				counter to_udp {}
				chain c {
					type filter hook $hook priority 0; policy accept;
					ip daddr $SERVER meta l4proto tcp counter name to_tcp
					ip daddr $SERVER meta l4proto udp counter name to_udp
				}
			}
		EOT
	done
}
# flowcount NS PROTO: the packets namespace NS's counter of PROTO counted.
flowcount() {
	ip netns exec "$1" nft -j list counter inet bbdiag "to_$2" 2>/dev/null | jq '[.nftables[] | select(.counter) | .counter.packets] | add // 0'
}
# flowcount_report: each protocol's packets lost between the router's
# forwarding and the receiver (the bottleneck's drops, and any veth's),
# once the queue has drained.
flowcount_report() {
	flowcount_on || return 0
	sleep 0.2
	local p in out
	for p in tcp udp; do
		in=$(flowcount "$R" "$p")
		out=$(flowcount "$B" "$p")
		echo "diag bottleneck $p: forwarded ${in:-?}, received ${out:-?}, lost $((${in:-0} - ${out:-0}))" >&2
	done
}

port=18600
# flows CASE PORT NAME: runs the case's flows together, on ports from PORT up;
# prints "transport gbps" per flow, in order.
flows() {
	local i=0 kinds=() servers=() clients=() files=() stats=() port=$2
	IFS=+ read -r -a kinds <<<"$1"
	for k in "${kinds[@]}"; do
		port=$((port + 2))
		local dbg=()
		[ -n "${DIAG:-}" ] && dbg=(-debug-addr "127.0.0.1:$((port + 1000))")
		if [ "$k" = quic ]; then
			ip netns exec "$B" "$tmp/quicflow" server -addr "$SERVER:$port" >"$tmp/server$i.out" 2>&1 &
		else
			ip netns exec "$B" "$bench" server -addr "$SERVER:$port" -sessions 1 "${dbg[@]}" >"$tmp/server$i.out" 2>&1 &
		fi
		servers+=($!)
		pids+=($!)
		i=$((i + 1))
	done
	for _ in $(seq 50); do
		local up=0
		for j in $(seq 0 $((i - 1))); do
			grep -qE "rsockbench server: rsock on|quicflow: listening" "$tmp/server$j.out" && up=$((up + 1))
		done
		[ "$up" = "$i" ] && break
		sleep 0.2
	done
	i=0
	local p=$((port - 2 * ${#kinds[@]}))
	[ -n "${DIAG:-}" ] && flowcount_start
	local tcpctr="TcpExtTCPSackRecovery TcpRetransSegs TcpExtTCPTimeouts TcpExtTCPLossProbes TcpExtTCPFastRetrans TcpExtTCPLostRetransmit TcpExtTCPSpuriousRTOs"
	[ -n "${DIAG:-}" ] && ip netns exec "$A" nstat -az $tcpctr 2>/dev/null | awk 'NR>1{print $1, $2}' >"$tmp/tcpctr.before"
	for k in "${kinds[@]}"; do
		p=$((p + 2))
		rm -f "$tmp/flow$i.json"
		local cdbg=()
		[ -n "${DIAG:-}" ] && cdbg=(-debug-addr "127.0.0.1:$((p + 2000))")
		if [ "$k" = quic ]; then
			ip netns exec "$A" "$tmp/quicflow" client -addr "$SERVER:$p" -duration "$DURATION" -json "$tmp/flow$i.json" >"$tmp/client$i.out" 2>&1 &
		else
			ip netns exec "$A" "$bench" client -addr "$SERVER:$p" -transports "$k" -modes stream \
				-sizes 64KiB -conns 1 -duration "$DURATION" -json "$tmp/flow$i.json" -tcp-cc "$TCP_CC" "${cdbg[@]}" >"$tmp/client$i.out" 2>&1 &
		fi
		clients+=($!)
		pids+=($!)
		files+=("$tmp/flow$i.json")
		i=$((i + 1))
	done
	if [ -n "${DIAG:-}" ]; then
		# The receivers' counters, a second before the flows end (a
		# server ends with its session).
		local q=$((port - 2 * ${#kinds[@]})) j=0
		for k in "${kinds[@]}"; do
			q=$((q + 2))
			j=$((j + 1))
			local at
			at=$(awk -v d="${DURATION%s}" 'BEGIN{print (d > 2 ? d - 1 : 1)}')
			if [ "$k" = tcp ]; then
				# The TCP data flow's state at the sender (cwnd, rtt,
				# retransmits, what limits it).
				(sleep "$at"; ip netns exec "$A" ss -tinH dst "$SERVER:$((q + 1))" >"$tmp/tcpss$j.out" 2>&1) &
				stats+=($!)
			fi
			if [ "$k" = rsock ]; then
				(sleep "$at"; ip netns exec "$B" "$bench" stat -addr "127.0.0.1:$((q + 1000))" >"$tmp/stat$j.out" 2>&1) &
				stats+=($!)
				(sleep "$at"; ip netns exec "$A" "$bench" stat -addr "127.0.0.1:$((q + 2000))" >"$tmp/sstat$j.out" 2>&1) &
				stats+=($!)
			fi
		done
	fi
	for c in "${clients[@]}"; do wait "$c" || true; done
	# Not a bare wait: a server whose client failed never ends by itself.
	for s in "${stats[@]}"; do wait "$s" || true; done
	if [ -n "${LOGDIR:-}" ]; then
		mkdir -p "$LOGDIR"
		for j in $(seq 0 $((i - 1))); do
			cp "$tmp/client$j.out" "$LOGDIR/$3-$1-$j.client"
			cp "$tmp/server$j.out" "$LOGDIR/$3-$1-$j.server"
		done
	fi
	if [ -n "${DIAG:-}" ]; then
		for ns in "$A" "$B"; do echo "diag $ns: $(ip netns exec "$ns" nstat -az UdpRcvbufErrors UdpSndbufErrors UdpInErrors 2>/dev/null | awk 'NR>1{printf "%s=%s ", $1, $2}')" >&2; done
		cat "$tmp"/stat*.out 2>/dev/null | sed 's/^/diag receiver: /' >&2
		cat "$tmp"/sstat*.out 2>/dev/null | sed 's/^/diag sender: /' >&2
		cat "$tmp"/tcpss*.out 2>/dev/null | tr -s ' \t' ' ' | sed 's/^/diag tcp sender: /' >&2
		# The sender's TCP counters over the case (every TCP flow of it):
		# timeouts, tail-loss probes, fast retransmits.
		echo "diag tcp counters: $(ip netns exec "$A" nstat -az $tcpctr 2>/dev/null | awk 'NR>1{print $1, $2}' |
			awk 'NR==FNR{b[$1]=$2; next} {printf "%s=%d ", $1, $2-b[$1]}' "$tmp/tcpctr.before" -)" >&2
		rm -f "$tmp"/stat*.out "$tmp"/sstat*.out "$tmp"/tcpss*.out
		flowcount_report
		echo "diag links: $(for ns in "$A" "$R" "$B"; do ip -n "$ns" -s -j link show | jq -r '.[] | "\(.ifname) txdrop=\(.stats64.tx.dropped) rxdrop=\(.stats64.rx.dropped)"' | tr '\n' ' '; done)" >&2
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
			echo "bottleneck-bench: flow $i of $1 failed: $(tail -1 "$tmp/client$i.out") (server: $(tail -1 "$tmp/server$i.out"))" >&2
		fi
		i=$((i + 1))
	done
}

echo "bottleneck-bench: $(uname -r), $(nproc) CPUs, MTU $MTU, $DURATION per case, topology $TOPOLOGY, RPS=$RPS, TCP $TCP_CC" >&2
echo "| rate | queue | case | goodput GB/s | drops at the bottleneck | rsock's share | Jain's index | CE marks |"
echo "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |"
IFS=, read -r -a rates <<<"$RATES"
IFS=, read -r -a queues <<<"$QUEUES"
IFS=, read -r -a cases <<<"$CASES"
for rate in "${rates[@]}"; do
	for queue in "${queues[@]}"; do
		for c in "${cases[@]}"; do
			echo "bottleneck-bench: $rate $queue $c (the queue holds $(queue_ms "$rate" "$queue") ms at the rate)" >&2
			bottleneck "$rate" "$queue"
			port=$((port + 10))
			out=$(flows "$c" "$port" "$rate-$queue")
			d=$(drops)
			marks
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
						if (k[i] == "rsock" || k[i] == "quic") rs += g[i]
					}
					share = "-"; jain = "-"
					if (n == 2 && sum > 0) {
						jain = sprintf("%.3f", sum * sum / (2 * sq))
						if (kinds == "tcp+rsock" || kinds == "tcp+quic") share = sprintf("%.2f", rs / sum)
					}
					printf "%s|%s|%s", s, share, jain
				}')
			IFS='|' read -r goodput share jain <<<"$row"
			echo "| $rate | $queue | $c | $goodput | $d | $share | $jain | $m |"
		done
	done
done
