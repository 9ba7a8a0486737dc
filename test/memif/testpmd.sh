#!/usr/bin/env bash
# Interop of the memif link with DPDK's net_memif, with dpdk-testpmd
# forwarding between two net_memif ports in io mode (a virtual wire):
#  1. testpmd's ports are memif servers; TestTestpmd connects one of our
#     links to each as a memif client (we create the shared memory);
#  2. our links are memif servers; TestTestpmdClient listens and testpmd's
#     ports connect as clients (DPDK creates the shared memory).
# Each sends RoCEv2 frames both ways through testpmd and checks every byte
# and every ICRC.
#  3. two rsockbench processes (netconn with RSOCK_MEMIF_WIRE: each
#     process's memif link connects to one testpmd port) stream 1 GiB over
#     a netconn connection through testpmd, verified byte for byte
#     (BYTES= to change the size).
#
# Skips (exit 0) when dpdk-testpmd is not installed (Debian: apt-get
# install dpdk-dev). testpmd busy-polls one core while it runs, for a few
# seconds. Run from anywhere: test/memif/testpmd.sh
#
# EAL: --no-huge -m 1024 (no hugepages needed); --no-shconf cannot be
# used, as net_memif needs the multi-process channel; each run has its own
# --file-prefix (a fresh one for every start). socket-abstract=no makes DPDK use the socket paths given
# (22.11 defaults to abstract sockets).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if ! command -v dpdk-testpmd >/dev/null 2>&1; then
	echo "SKIP: dpdk-testpmd is not installed (Debian: apt-get install dpdk-dev)"
	exit 0
fi
export PATH="/usr/local/go/bin:$PATH"
dir=$(mktemp -d /tmp/rsock-memif.XXXXXX) # mode 0700
prefix="rsock-memif-$$"
secret="rsock-testpmd-$$"
log="$dir/testpmd.log"
pid=
socks=()
starts=0
gopid=
cleanup() {
	stop_testpmd
	if [ -n "$gopid" ]; then kill "$gopid" 2>/dev/null || true; fi
	rm -rf "$dir"
	rm -rf "/var/run/dpdk/$prefix"-* "${XDG_RUNTIME_DIR:-/nonexistent}/dpdk/$prefix"-* 2>/dev/null || true
}
trap cleanup EXIT

# start_testpmd ROLE SOCK0 SOCK1 starts testpmd in the background.
start_testpmd() {
	starts=$((starts + 1))
	dpdk-testpmd --no-huge -m 1024 -l 0,1 --file-prefix "$prefix-$starts" \
		--vdev="net_memif0,role=$1,id=0,socket=$2,socket-abstract=no,secret=$secret" \
		--vdev="net_memif1,role=$1,id=0,socket=$3,socket-abstract=no,secret=$secret" \
		-- --forward-mode=io --auto-start --stats-period=5 --total-num-mbufs=16384 >"$log" 2>&1 &
	pid=$!
	socks=("$2" "$3")
}

# stop_testpmd stops it (SIGINT: it closes its ports and cleans up) and
# removes the memif sockets it served. testpmd 22.11 sometimes crashes on
# SIGINT after its memif peers are gone (a segmentation fault in its
# shutdown path), which leaves its socket files behind: a later phase that
# waits for sockets would then find the stale files and connect to nobody
# ("connection refused"). Its exit status is ignored for that reason; the
# phases check the traffic itself.
stop_testpmd() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -INT "$pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	[ -z "$pid" ] || wait "$pid" 2>/dev/null || true
	pid=
	rm -f "${socks[@]}"
	socks=()
}

# wait_sockets PATH... waits up to 60 s for the sockets to appear.
wait_sockets() {
	for _ in $(seq 600); do
		local all=1
		for s in "$@"; do [ -S "$s" ] || all=0; done
		[ "$all" = 1 ] && return 0
		sleep 0.1
	done
	return 1
}

cd "$root"
go test -c -o "$dir/memif.test" ./test/memif/
status=0

echo "== testpmd as memif server, our links as clients"
start_testpmd server "$dir/port0.sock" "$dir/port1.sock"
if ! wait_sockets "$dir/port0.sock" "$dir/port1.sock"; then
	echo "dpdk-testpmd did not create its memif sockets:"
	cat "$log"
	exit 1
fi
MEMIF_TESTPMD_SOCKETS="$dir/port0.sock $dir/port1.sock" MEMIF_TESTPMD_SECRET="$secret" \
	"$dir/memif.test" -test.count=1 -test.run '^TestTestpmd$' -test.v || status=$?
stop_testpmd
if [ "$status" != 0 ]; then
	echo "--- dpdk-testpmd log"
	cat "$log"
	exit "$status"
fi

echo "== netconn through testpmd: rsockbench client -verify -bytes ${BYTES:-1GiB}"
go build -o "$dir/rsockbench" ./cmd/rsockbench
start_testpmd server "$dir/port0.sock" "$dir/port1.sock"
if ! wait_sockets "$dir/port0.sock" "$dir/port1.sock"; then
	echo "dpdk-testpmd did not create its memif sockets:"
	cat "$log"
	exit 1
fi
# The sockets exist before their ports take clients ("ID not found"):
# wait until testpmd forwards.
forwarding=0
for _ in $(seq 300); do
	if grep -q "forwards packets" "$log"; then forwarding=1; break; fi
	sleep 0.1
done
if [ "$forwarding" = 0 ]; then
	echo "dpdk-testpmd did not start forwarding within 30 s:"
	cat "$log"
	exit 1
fi
RSOCK_MEMIF_WIRE="$dir/port1.sock" RSOCK_MEMIF_SECRET="$secret" \
	"$dir/rsockbench" server -verify -link memif -addr 127.0.0.1:0 -sessions 1 >"$dir/server.out" 2>&1 &
gopid=$!
addr=
for _ in $(seq 100); do
	addr=$(sed -n 's/^rsockbench server: rsock on \([^ ,]*\).*/\1/p' "$dir/server.out" | head -1)
	[ -n "$addr" ] && break
	sleep 0.1
done
if [ -z "$addr" ]; then
	echo "rsockbench server did not start:"
	cat "$dir/server.out"
	exit 1
fi
RSOCK_MEMIF_WIRE="$dir/port0.sock" RSOCK_MEMIF_SECRET="$secret" \
	"$dir/rsockbench" client -verify -link memif -addr "$addr" -bytes "${BYTES:-1GiB}" -json "$dir/client.json" || status=$?
wait "$gopid" || status=$?
gopid=
cat "$dir/server.out"
if [ "$status" = 0 ] && ! grep -q '"conn_transport":"rdma/softroce/memif","server_transport":"rdma/softroce/memif"' "$dir/client.json"; then
	echo "the stream did not run over memif:"
	cat "$dir/client.json"
	status=1
fi
stop_testpmd
if [ "$status" != 0 ]; then
	echo "--- dpdk-testpmd log"
	cat "$log"
	exit "$status"
fi

echo "== our links as memif servers, testpmd as client"
MEMIF_TESTPMD_LISTEN="$dir/our0.sock $dir/our1.sock" MEMIF_TESTPMD_SECRET="$secret" \
	"$dir/memif.test" -test.count=1 -test.run '^TestTestpmdClient$' -test.v &
gopid=$!
if wait_sockets "$dir/our0.sock" "$dir/our1.sock"; then
	start_testpmd client "$dir/our0.sock" "$dir/our1.sock"
fi
wait "$gopid" || status=$?
stop_testpmd
if [ "$status" != 0 ]; then
	echo "--- dpdk-testpmd log"
	cat "$log"
fi
exit "$status"
