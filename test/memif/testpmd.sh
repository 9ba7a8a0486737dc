#!/usr/bin/env bash
# Interop of the memif link with DPDK's net_memif: dpdk-testpmd runs two
# net_memif server ports in io forwarding mode (a virtual wire), and
# TestTestpmd (testpmd_test.go) connects one of our memif links to each
# port as a memif client and sends RoCEv2 frames both ways through it,
# checking every byte and every ICRC.
#
# Skips (exit 0) when dpdk-testpmd is not installed (Debian: apt-get
# install dpdk-dev). testpmd busy-polls one core while it runs, for a few
# seconds. Run from anywhere: test/memif/testpmd.sh
#
# EAL: --no-huge -m 1024 (no hugepages needed); --no-shconf cannot be
# used, as net_memif needs the multi-process channel; each run has its own
# --file-prefix. socket-abstract=no makes DPDK use the socket paths given
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
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -INT "$pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
	rm -rf "/var/run/dpdk/$prefix" "${XDG_RUNTIME_DIR:-/nonexistent}/dpdk/$prefix" 2>/dev/null || true
}
trap cleanup EXIT

dpdk-testpmd --no-huge -m 1024 -l 0,1 --file-prefix "$prefix" \
	--vdev="net_memif0,role=server,id=0,socket=$dir/port0.sock,socket-abstract=no,secret=$secret" \
	--vdev="net_memif1,role=server,id=0,socket=$dir/port1.sock,socket-abstract=no,secret=$secret" \
	-- --forward-mode=io --auto-start --stats-period=5 --total-num-mbufs=16384 >"$log" 2>&1 &
pid=$!
for _ in $(seq 200); do
	[ -S "$dir/port0.sock" ] && [ -S "$dir/port1.sock" ] && break
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "dpdk-testpmd exited early:"
		cat "$log"
		exit 1
	fi
	sleep 0.1
done
if ! [ -S "$dir/port0.sock" ] || ! [ -S "$dir/port1.sock" ]; then
	echo "dpdk-testpmd did not create its memif sockets:"
	cat "$log"
	exit 1
fi
cd "$root"
status=0
MEMIF_TESTPMD_SOCKETS="$dir/port0.sock $dir/port1.sock" MEMIF_TESTPMD_SECRET="$secret" \
	go test -count=1 -run '^TestTestpmd$' -v ./test/memif/ || status=$?
if [ "$status" != 0 ]; then
	echo "--- dpdk-testpmd log"
	cat "$log"
fi
exit "$status"
