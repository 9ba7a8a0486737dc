#!/usr/bin/env bash
# The cross-host main job: rsock against TCP between two hosts without an
# RNIC, as two network namespaces (A, B) joined through a router namespace
# (R, IP forwarding), every veth at MTU 1500. rsockbench server runs in B,
# rsockbench client in A, twice:
#
#   default          the library's settings (auto): between hosts without an
#                    RDMA device rsock runs on TCP, and the client prints why
#   RSOCK_LINK=udp   in both processes: soft-RoCE over the kernel's UDP
#
# so that the two are side by side, each against plain TCP in the same run.
# Run as root (it makes network namespaces). Extra arguments go to both
# `rsockbench client` runs (try -h).
#
# Settings (environment): MTU=1500 SIZES=64B,16KiB,1MiB CONNS=1,8
# DURATION=1s FAMILY=ipv4 (or ipv6) RSOCKBENCH=FILE (run this binary instead
# of building one from the tree). GOMAXPROCS is Go's default in both
# processes unless the environment sets it.
#
# Namespaces are named rsbnetns-<random>-{a,r,b} and removed on exit, also on
# Ctrl-C or a kill of the script (trap); the server is ended by its PID.
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"
here="$(cd "$(dirname "$0")/.." && pwd)"

if [ "$(id -u)" != 0 ]; then
	echo "rsockbench-netns: not root: cannot create network namespaces" >&2
	exit 1
fi
command -v ip >/dev/null || { echo "rsockbench-netns: ip is missing (apt-get install iproute2)" >&2; exit 1; }

extra=("$@")
MTU="${MTU:-1500}"
SIZES="${SIZES:-64B,16KiB,1MiB}"
CONNS="${CONNS:-1,8}"
DURATION="${DURATION:-1s}"
FAMILY="${FAMILY:-ipv4}"

tmp=$(mktemp -d)
prefix="rsbnetns-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
A="$prefix-a" R="$prefix-r" B="$prefix-b"
server=""
cleanup() {
	trap - EXIT INT TERM
	if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
		kill -TERM "$server" 2>/dev/null || true
		wait "$server" 2>/dev/null || true
	fi
	for ns in "$A" "$B" "$R"; do
		ip netns del "$ns" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

bin="${RSOCKBENCH:-}"
if [ -z "$bin" ]; then
	command -v go >/dev/null || { echo "rsockbench-netns: Go is missing (install it at /usr/local/go)" >&2; exit 1; }
	bin="$tmp/rsockbench"
	(cd "$here" && go build -o "$bin" ./cmd/rsockbench)
fi

# A (a0) -- (r0) R (r1) -- (b0) B
for ns in "$A" "$R" "$B"; do
	ip netns add "$ns"
	ip -n "$ns" link set lo up
done
ip link add a0 netns "$A" type veth peer name r0 netns "$R"
ip link add b0 netns "$B" type veth peer name r1 netns "$R"
ip -n "$A" link set a0 mtu "$MTU" up
ip -n "$R" link set r0 mtu "$MTU" up
ip -n "$R" link set r1 mtu "$MTU" up
ip -n "$B" link set b0 mtu "$MTU" up
if [ "$FAMILY" = ipv6 ]; then
	ip -n "$A" addr add fd78:1::2/64 dev a0 nodad
	ip -n "$R" addr add fd78:1::1/64 dev r0 nodad
	ip -n "$R" addr add fd78:2::1/64 dev r1 nodad
	ip -n "$B" addr add fd78:2::2/64 dev b0 nodad
	ip netns exec "$R" sysctl -qw net.ipv6.conf.all.forwarding=1
	ip -n "$A" route add default via fd78:1::1
	ip -n "$B" route add default via fd78:2::1
	serverIP=fd78:2::2
	addr="[$serverIP]:18600"
else
	ip -n "$A" addr add 10.78.1.2/24 dev a0
	ip -n "$R" addr add 10.78.1.1/24 dev r0
	ip -n "$R" addr add 10.78.2.1/24 dev r1
	ip -n "$B" addr add 10.78.2.2/24 dev b0
	ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=1
	ip -n "$A" route add default via 10.78.1.1
	ip -n "$B" route add default via 10.78.2.1
	serverIP=10.78.2.2
	addr="$serverIP:18600"
fi


# run LABEL [VAR=VALUE...]: one comparison, with the variables set in both
# processes.
run() {
	local label="$1"
	shift
	echo "== $label: A ($FAMILY, MTU $MTU) through router R to B; lscpu: $(lscpu | sed -n 's/^Model name: *//p')"
	ip netns exec "$B" env "$@" "$bin" server -addr "$addr" -sessions 1 >"$tmp/server.out" 2>&1 &
	server=$!
	for _ in $(seq 100); do
		grep -q '^rsockbench server: rsock on ' "$tmp/server.out" && break
		kill -0 "$server" 2>/dev/null || { cat "$tmp/server.out" >&2; exit 1; }
		sleep 0.1
	done
	ip netns exec "$A" env "$@" "$bin" client -addr "$addr" -sizes "$SIZES" -conns "$CONNS" -duration "$DURATION" "${extra[@]}"
	wait "$server" || { cat "$tmp/server.out" >&2; exit 1; }
	server=""
	echo
}

run "default (auto)"
run "RSOCK_LINK=udp" RSOCK_LINK=udp
