#!/usr/bin/env bash
# Runs rsock's test suite: vet, every package's tests under the race
# detector (goleak checks each package for leaked goroutines), and a short
# run of every fuzz target. FUZZTIME=0 skips the fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
FUZZTIME="${FUZZTIME:-10s}"

echo "== go vet"
go vet ./...

echo "== go test -race"
go test -race -count=1 -timeout 20m ./...

# On loopback the default link (auto) is memif: run the packages that make
# rsock connections once more over the udp link, so that neither goes
# untested.
echo "== go test -race, RSOCK_LINK=udp"
RSOCK_LINK=udp go test -race -count=1 -timeout 10m ./netconn/ ./examples/... ./cmd/... ./internal/streambench/

# The rdmacore provider (cgo over libibverbs, behind its build tag): vet
# and build with the tag, check that the default build stays cgo-free,
# and run the tests that need no RDMA device (with none, auto picks
# soft-RoCE). Its tests on a device run in qemu guests with the kernel's
# rxe: test/rxe/rdmacore.sh (not part of CI).
echo "== -tags rdmacore"
CGO_ENABLED=0 go build ./...
go vet -tags rdmacore ./verbs/... ./netconn/ ./cmd/rsockbench/
go build -tags rdmacore ./...
go test -race -count=1 -tags rdmacore -timeout 10m ./verbs/ ./verbs/rdmacore/ ./netconn/

# fuzz runs one target for FUZZTIME. Go 1.26's fuzzing coordinator can
# report "context deadline exceeded" as a failure when -fuzztime ends
# while a worker is busy (go.dev/issue/75804, fixed in Go 1.27); such a run
# found nothing (a real finding writes a failing input), so it is run once
# more, and fails only if that fails too.
fuzz() {
	local pkg=$1 target=$2 log
	log=$(mktemp)
	for attempt in 1 2; do
		if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" >"$log" 2>&1; then
			rm -f "$log"
			return 0
		fi
		if [ "$attempt" = 1 ] && grep -q 'context deadline exceeded' "$log" &&
			! grep -q 'Failing input written' "$log"; then
			echo "   the fuzzing coordinator's -fuzztime race (go.dev/issue/75804), nothing found: running it again"
			continue
		fi
		cat "$log"
		rm -f "$log"
		return 1
	done
}

# Interop with DPDK's memif (dpdk-testpmd as a virtual wire), including a
# 1 GiB netconn stream; it skips when dpdk-testpmd is not installed.
echo "== memif through dpdk-testpmd"
bash test/memif/testpmd.sh >"${TMPDIR:-/tmp}/rsock-testpmd.log" 2>&1 || {
	cat "${TMPDIR:-/tmp}/rsock-testpmd.log"
	exit 1
}
grep -E '^(SKIP|== |--- |verified)' "${TMPDIR:-/tmp}/rsock-testpmd.log" || true

# The dpdk link (cgo, -tags dpdk, DPDK 22.11): its own tests over a
# net_ring pair, every verbs operation over net_ring, netconn streams
# between two processes over net_memif, over net_af_packet on a veth
# between namespaces, and between the dpdk and udp links there; no
# hugepages, no NIC. The default build stays cgo-free.
echo "== dpdk link (-tags dpdk)"
CGO_ENABLED=0 go build ./...
go vet -tags dpdk ./...
go test -race -tags dpdk -count=1 -timeout 10m ./verbs/softroce/link/dpdk/... ./test/dpdk/
go test -race -tags dpdk -count=1 -timeout 10m -run 'TestOperations/dpdk' ./verbs/softroce/

if [ "$FUZZTIME" != "0" ]; then
	echo "== fuzz ($FUZZTIME per target)"
	for pkg in $(go list ./...); do
		dir=$(go list -f '{{.Dir}}' "$pkg")
		for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
			echo "-- $pkg $target"
			fuzz "$pkg" "$target"
		done
	done
fi
echo "== all tests passed"
