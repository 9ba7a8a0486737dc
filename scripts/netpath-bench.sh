#!/usr/bin/env bash
# Goodput of rsock against TCP over a real network path under random loss,
# printed as a markdown table (as root: it makes network namespaces).
#
# Each row is a fresh pair of namespaces joined by a veth (internal/netlab)
# at one MTU, with nftables dropping a share of the frames at the
# receiver's ingress (one way) or at both ends' (both ways). In each row
# rsockbench client -verify moves BYTES over plain TCP and then over rsock,
# back to back, to rsockbench server -verify; the columns are both
# goodputs (GB/s, 10^9 bytes per second, every byte verified), their
# ratio, rsock's retransmissions, sequence NAKs sent and received and ACK
# timeouts (client and server summed), and the frames the rules dropped.
#
# Settings (environment):
#   MTUS=9000,1500  LOSS=0,0.1,1,5,20 (percent)  DIRECTIONS=one,both
#   FAMILIES=ipv4 (ipv4,ipv6 for both)  BYTES=256MiB (0: run DURATION each)
#   DURATION=10s  CASE_TIMEOUT=2m (per transport per row; a run still going
#   then is ended and shown as "timeout")  TOTAL_TIMEOUT=60m (no row starts
#   after it)  JSON=FILE (also write the rows as JSON lines)
#   RSOCKBENCH=FILE (run this rsockbench binary instead of building one from
#   the tree, to compare two builds)
#
# The table goes to stdout, progress to stderr. Namespaces are named
# netpath-bench-<random>-…, and removed on exit, also on Ctrl-C or a kill
# of the script (trap); the rsockbench processes are ended by their PIDs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

if [ "$(id -u)" != 0 ]; then
	echo "netpath-bench: not root: cannot create network namespaces" >&2
	exit 1
fi
for tool in ip nft ethtool go; do
	if ! command -v "$tool" >/dev/null; then
		echo "netpath-bench: $tool is missing (apt-get install iproute2 nftables ethtool; Go at /usr/local/go)" >&2
		exit 1
	fi
done

MTUS="${MTUS:-9000,1500}"
LOSS="${LOSS:-0,0.1,1,5,20}"
DIRECTIONS="${DIRECTIONS:-one,both}"
FAMILIES="${FAMILIES:-ipv4}"
BYTES="${BYTES:-256MiB}"
DURATION="${DURATION:-10s}"
CASE_TIMEOUT="${CASE_TIMEOUT:-2m}"
TOTAL_TIMEOUT="${TOTAL_TIMEOUT:-60m}"

tmp=$(mktemp -d)
prefix="netpath-bench-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
pid=""
cleanup() {
	trap - EXIT INT TERM
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		# On SIGTERM it ends its row's processes, removes its lab and
		# prints the rows so far; give it ten seconds, then kill it.
		for _ in $(seq 20); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	# What a killed run left: processes in our namespaces, then the
	# namespaces themselves (only ours: the prefix is this run's).
	for ns in $(ip netns list | awk '{print $1}' | grep "^${prefix}-" || true); do
		for p in $(ip netns pids "$ns" 2>/dev/null); do
			kill -KILL "$p" 2>/dev/null || true
		done
		ip netns del "$ns" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "netpath-bench: building rsockbench and netlab" >&2
if [ -n "${RSOCKBENCH:-}" ]; then cp "$RSOCKBENCH" "$tmp/rsockbench"; else go build -o "$tmp/rsockbench" ./cmd/rsockbench; fi
go build -o "$tmp/netlab" ./internal/netlab/cmd/netlab

args=(goodput -rsockbench "$tmp/rsockbench" -prefix "$prefix"
	-mtus "$MTUS" -loss "$LOSS" -directions "$DIRECTIONS" -families "$FAMILIES"
	-bytes "$BYTES" -duration "$DURATION"
	-case-timeout "$CASE_TIMEOUT" -total-timeout "$TOTAL_TIMEOUT")
if [ -n "${JSON:-}" ]; then
	args+=(-json "$JSON")
fi
echo "netpath-bench: $(uname -r), $(nproc) CPUs, rows of $BYTES per transport ($CASE_TIMEOUT at most each)" >&2
"$tmp/netlab" "${args[@]}" &
pid=$!
wait "$pid"
