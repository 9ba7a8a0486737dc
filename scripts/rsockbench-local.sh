#!/usr/bin/env bash
# The main job: builds rsockbench and runs a local rsock-vs-TCP comparison
# on loopback (a server child process and a client), printing the tables
# and writing rsockbench.json and rsockbench.svg in the current directory.
# Extra arguments go to the main `rsockbench local` run (try -h).
#
# rsock runs with the library's defaults, as any program does: on one
# host that is shm. The main run uses Go's default GOMAXPROCS in both
# processes (one P per CPU), for TCP and rsock alike: the configuration a
# service has. A short run with -procs 1 (1 and 64 KiB, 1 MiB; one
# connection) follows beside it, never instead.
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"
here="$(cd "$(dirname "$0")/.." && pwd)"
if ! command -v go >/dev/null; then
	echo "Go is missing: install Go 1.26 (for example at /usr/local/go)" >&2
	exit 1
fi
bin="$(mktemp -d)/rsockbench"
trap 'rm -rf "$(dirname "$bin")"' EXIT
(cd "$here" && go build -o "$bin" ./cmd/rsockbench)
echo "== Go's default GOMAXPROCS"
"$bin" local -json rsockbench.json -plot rsockbench.svg "$@"
echo
echo "== beside it: -procs 1"
"$bin" local -procs 1 -sizes 64B,64KiB,1MiB -conns 1
echo "wrote rsockbench.json and rsockbench.svg (Go's default GOMAXPROCS)"
