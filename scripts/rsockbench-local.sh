#!/usr/bin/env bash
# The main job: builds rsockbench and runs a local rsock-vs-TCP comparison
# on loopback (a server child process and a client), printing the tables
# and writing rsockbench.json and rsockbench.svg in the current directory.
# Extra arguments go to `rsockbench local` (try -h).
#
# The two processes share the machine, so each gets half of its CPUs as
# GOMAXPROCS (-procs; at least 1), TCP and rsock alike: with Go's default
# both would run one P per CPU, and on 2 CPUs the four Ps make every
# goroutine hand-off a thread wake-up. `-procs 0` (after this script's
# own) restores Go's default.
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"
here="$(cd "$(dirname "$0")/.." && pwd)"
if ! command -v go >/dev/null; then
	echo "Go is missing: install Go 1.26 (for example at /usr/local/go)" >&2
	exit 1
fi
bin="$(mktemp -d)/rsockbench"
(cd "$here" && go build -o "$bin" ./cmd/rsockbench)
procs=$(( $(nproc) / 2 ))
[ "$procs" -ge 1 ] || procs=1
"$bin" local -procs "$procs" -json rsockbench.json -plot rsockbench.svg "$@"
rm -rf "$(dirname "$bin")"
echo "wrote rsockbench.json and rsockbench.svg"
