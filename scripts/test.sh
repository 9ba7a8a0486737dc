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

if [ "$FUZZTIME" != "0" ]; then
	echo "== fuzz ($FUZZTIME per target)"
	for pkg in $(go list ./...); do
		dir=$(go list -f '{{.Dir}}' "$pkg")
		for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
			echo "-- $pkg $target"
			go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" >/tmp/rsock-fuzz.log 2>&1 || { cat /tmp/rsock-fuzz.log; exit 1; }
		done
	done
fi
echo "== all tests passed"
