#!/usr/bin/env bash
# The rdmacore provider (verbs/rdmacore, cgo over libibverbs) on a real
# RDMA device: the Linux kernel's rxe in the qemu guests of
# ../shared/rxe-guest (relative to the repository root), which run cgo
# binaries built on this host (same Debian release, libibverbs 44). Not
# part of .ci/run: it needs root and minutes of emulation. Run from
# anywhere:  test/rxe/rdmacore.sh
#
# Two guests, g1 (10.99.0.11) and g2 (10.99.0.12) unless RXE_G1/RXE_G2
# name others, each with rxe0 on a bridge in netns rxelab (RXE_NETNS,
# RXE_BRIDGE), whose host side is 10.99.0.1. Booted once,
# everything runs in them, and they are stopped at the end:
#
#   1. verbs: every verbs operation through verbs/rdmacore on rxe0 in g1
#      (go test -tags rdmacore ./verbs/rdmacore: SEND, SEND_WITH_IMM,
#      WRITE, WRITE_WITH_IMM, READ at sizes around the MTU and 1 MiB,
#      atomics, inline, batches; state machine, access errors, the
#      completion channel, close rules), QP pairs looped through rxe0;
#   2. netconn: in g1, nettest.TestConn and a 1 MiB echo over rdmacore
#      (both ends through rxe0), and auto passing over rdmacore for
#      loopback; between g1 and g2, nettest.TestConn through a splicing
#      peer in g2 (TestPeerConn) and a two-way SHA-256-checked exchange
#      (TestPeerExchange, G2G_BYTES each way); Transport must start with
#      rdma/rdmacore/;
#   3. rsockbench server -verify in g2 and client -verify -bytes
#      VERIFY_BYTES in g1, both -provider rdmacore;
#   4. mixed peers: the host on soft-RoCE (in netns rxelab, 10.99.0.1)
#      against g1 on rdmacore, host as server and as client, MIX_BYTES
#      (64 MiB) each way at once, SHA-256 compared on both sides;
#   5. numbers (under emulation functional, not performance):
#      a. rsockbench server in g2 and client in g1, -provider rdmacore:
#         rsock over rxe0 against TCP between the guests;
#      b. rsockbench local -host IP1 -provider rdmacore in g1: both
#         processes on rxe0 (rxe loops back; loopback itself has no
#         RoCEv2 GID), against TCP, Transport rdma/rdmacore/rxe0 checked
#         at both ends;
#      c. rsockbench verbs -provider rdmacore, -local in g1 and g1 -> g2:
#         write_bw 64 KiB and write_lat 2 B, 200 iterations;
#      d. the same rsockbench verbs -local on soft-RoCE in g1;
#      e. perftest's ib_write_bw / ib_write_lat g1 -> g2, same sizes;
#   6. async events: g1's eth0 taken down gives rxe's port error, which
#      fails the QPs (flushed receives, Cause wrapping ECONNRESET); it
#      runs last and brings eth0 up again.
#
# Environment: G2G_BYTES (16777216), VERIFY_BYTES (32MiB), MIX_BYTES
# (67108864), PARTS ("1 2 3 4 5 6"; g2 is booted only for parts 2, 3 and
# 5), OUT (/tmp/rxe-rdmacore), KEEP_GUEST (1: leave the guests running),
# CASE_TIMEOUT (600 s), RACE (1: build the verbs test binary with -race).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
T=$root/../shared/rxe-guest
if [ ! -d "$T" ] || [ ! -x "$T/start-guest.sh" ]; then
	echo "SKIP: ../shared/rxe-guest (the qemu rxe guests) is not present"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "SKIP: not root: cannot start the guests and their network namespace"
	exit 0
fi
T=$(cd "$T" && pwd)
G2G_BYTES=${G2G_BYTES:-16777216}
VERIFY_BYTES=${VERIFY_BYTES:-32MiB}
MIX_BYTES=${MIX_BYTES:-67108864}
PARTS=${PARTS:-"1 2 3 4 5 6"}
OUT=${OUT:-/tmp/rxe-rdmacore}
IMG=${RXE_IMG:-/var/tmp/rxe-guest/img}
RUN=${RXE_RUN:-/tmp/rxe-guest}
NS=${RXE_NETNS:-rxelab}
HOST_IP=${RXE_HOST_IP:-10.99.0.1}
CASE_TIMEOUT=${CASE_TIMEOUT:-600}
RACE=${RACE:-1}
# The guests: RXE_G1/RXE_G2 (g1, g2); guest gN has 10.99.0.1N.
G1=${RXE_G1:-g1} G2=${RXE_G2:-g2}
IP1=10.99.0.1${G1#g} IP2=10.99.0.1${G2#g}
case "$G1$G2" in g[0-9]g[0-9]) ;; *)
	echo "FAIL: RXE_G1/RXE_G2 must be g0..g9 (guest gN has 10.99.0.1N)"; exit 1 ;;
esac
mkdir -p "$OUT"
log() { echo "[rxe-rdmacore $(date +%T)] $*" >&2; }
export PATH="/usr/local/go/bin:$PATH"

if [ ! -f "$IMG/vmlinux" ] || [ ! -f "$IMG/initrd.img" ] || [ ! -d "$IMG/rootfs/usr" ]; then
	log "building the guest image into $IMG"
	"$T/build-image.sh" "$IMG" || { echo "FAIL: build-image.sh"; exit 1; }
fi

log "building the test binaries and rsockbench with -tags rdmacore"
BIN=$OUT/bin
mkdir -p "$BIN"
(cd "$root" &&
	go test -c $([ "$RACE" = 1 ] && echo -race) -tags rdmacore -o "$BIN/rdmacore.test" ./verbs/rdmacore/ &&
	go test -c -tags rdmacore -o "$BIN/netconn.test" ./netconn/ &&
	go build -tags rdmacore -o "$BIN/rsockbench" ./cmd/rsockbench) || { echo "FAIL: go build"; exit 1; }

want_part() { [[ " $PARTS " == *" $1 "* ]]; }
guest_up() { [ -f "$RUN/$1/ready" ] && [ -f "$RUN/$1/qemu.pid" ] && kill -0 "$(cat "$RUN/$1/qemu.pid")" 2>/dev/null; }
# g2 takes part only in parts 2, 3 and 5.
guests=$G1
if want_part 2 || want_part 3 || want_part 5; then
	guests="$G1 $G2"
fi
for g in $guests; do
	if guest_up $g; then
		log "reusing running guest $g"
	else
		log "starting guest $g"
		"$T/start-guest.sh" -n $g -q || { echo "FAIL: start-guest.sh $g"; exit 1; }
	fi
	cp "$BIN"/* "$RUN/$g/"
done
cleanup() {
	if [ "${KEEP_GUEST:-0}" != 1 ]; then
		log "stopping the guests"
		# The last guest also takes the namespace and bridge it made.
		if [ "$guests" = "$G1" ]; then
			"$T/stop-guest.sh" $G1 --all-netns >/dev/null 2>&1
		else
			"$T/stop-guest.sh" $G1 >/dev/null 2>&1
			"$T/stop-guest.sh" $G2 --all-netns >/dev/null 2>&1
		fi
	fi
}
trap cleanup EXIT

gx() { "$T/guest-exec.sh" -t "$CASE_TIMEOUT" "$@"; }
results=()
fail=0
# record NAME STATUS... : PASS when every status is 0.
record() {
	local name=$1 st=PASS
	shift
	for rc in "$@"; do [ "$rc" = 0 ] || st=FAIL; done
	[ $st = PASS ] || fail=$((fail + 1))
	results+=("$st $name (exit $*)")
	log "${results[-1]}"
}
# gtest GUEST LOG ENV... -- TESTARGS: runs a test binary in a guest.
gtest() {
	local g=$1 out=$2
	shift 2
	gx "$g" -- "cd /mnt/state && $* 2>&1" >"$out" 2>&1
}
# pair OUT SERVER CLIENT: runs the command SERVER in G2 (output in
# OUT-server.txt), then after 3 s CLIENT in G1 (OUT-client.txt); sets crc
# and src to their exit statuses.
pair() {
	gx $G2 -- "$2" >"$1-server.txt" 2>&1 &
	local spid=$!
	sleep 3
	gx $G1 -- "$3" >"$1-client.txt" 2>&1
	crc=$?
	wait $spid
	src=$?
}
to=$((CASE_TIMEOUT - 10))

gx $G1 -- 'ibv_devinfo -d rxe0 | grep -E "state|active_mtu"; ldd /mnt/state/rdmacore.test 2>/dev/null | grep ibverbs' >"$OUT/devinfo.txt" 2>&1
gx $G1 -- 'rdma statistic show link rxe0/1' >"$OUT/stats-before-g1.txt" 2>&1

if want_part 1; then
	log "1. verbs operations through verbs/rdmacore on rxe0 (g1)"
	# TestPortDownFailsQP takes eth0 down: part 6 runs it, last.
	gtest $G1 "$OUT/1-verbs.txt" "timeout $to ./rdmacore.test -test.v -test.timeout ${to}s -test.skip TestPortDownFailsQP"
	rc=$?
	grep -E '^(--- |ok|PASS|FAIL)' "$OUT/1-verbs.txt" | grep -v '^    ' >&2
	grep -q -- '--- SKIP' "$OUT/1-verbs.txt" && rc=skip
	record "1 verbs ops on rxe0 ($(grep -c -- '--- PASS' "$OUT/1-verbs.txt") passed subtests)" "$rc"
fi

if want_part 2; then
	log "2a. netconn over rdmacore inside g1 (nettest.TestConn, echo, auto)"
	gtest $G1 "$OUT/2a-netconn-g1.txt" "RSOCK_RDMACORE_ADDR=$IP1 timeout $to ./netconn.test -test.v -test.timeout ${to}s -test.run 'TestAutoWithoutRDMACoreDevice|TestRDMACoreConn|TestLinksInteroperate'"
	rc=$?
	grep -q 'transport rdma/rdmacore/rxe0' "$OUT/2a-netconn-g1.txt" || rc=no-rdmacore-transport
	record "2a netconn nettest.TestConn over rdmacore in g1" "$rc"

	log "2b. nettest.TestConn between g1 and g2 through a splicing peer"
	env2="RSOCK_PROVIDER=rdmacore RSOCK_PEER_TRANSPORT=rdma/rdmacore/"
	gtest $G2 "$OUT/2b-splice-g2.txt" "$env2 RSOCK_PEER_SPLICE=$IP2:18710 timeout $to ./netconn.test -test.v -test.timeout ${to}s -test.run TestPeerConn" &
	spid=$!
	sleep 3
	gtest $G1 "$OUT/2b-conn-g1.txt" "$env2 RSOCK_PEER_CONN=$IP2:18710 timeout $to ./netconn.test -test.v -test.timeout ${to}s -test.run TestPeerConn"
	crc=$?
	wait $spid
	src=$?
	record "2b nettest.TestConn g1<->g2 over rdmacore" "$crc" "$src"

	log "2c. two-way exchange g1<->g2, $G2G_BYTES bytes each way"
	gtest $G2 "$OUT/2c-exchange-g2.txt" "$env2 RSOCK_PEER_LISTEN=$IP2:18711 RSOCK_PEER_BYTES=$G2G_BYTES timeout $to ./netconn.test -test.v -test.timeout ${to}s -test.run TestPeerExchange" &
	spid=$!
	sleep 2
	gtest $G1 "$OUT/2c-exchange-g1.txt" "$env2 RSOCK_PEER_DIAL=$IP2:18711 RSOCK_PEER_BYTES=$G2G_BYTES timeout $to ./netconn.test -test.v -test.timeout ${to}s -test.run TestPeerExchange"
	crc=$?
	wait $spid
	src=$?
	grep -h '^exchange' "$OUT"/2c-exchange-g*.txt >&2
	record "2c exchange g1<->g2 over rdmacore, SHA-256 both ways" "$crc" "$src"
fi

if want_part 3; then
	log "3. rsockbench server -verify (g2) / client -verify (g1) over rdmacore"
	gx $G2 -- "cd /mnt/state && timeout $to ./rsockbench server -verify -provider rdmacore -sessions 1 -addr $IP2:18600 -counters" >"$OUT/3-server.txt" 2>&1 &
	spid=$!
	sleep 3
	gx $G1 -- "cd /mnt/state && timeout $to ./rsockbench client -verify -bytes $VERIFY_BYTES -provider rdmacore -addr $IP2:18600 -timeout 60s -counters" >"$OUT/3-client.txt" 2>&1
	crc=$?
	wait $spid
	src=$?
	tail -5 "$OUT/3-client.txt" >&2
	grep -q 'rdma/rdmacore' "$OUT/3-client.txt" "$OUT/3-server.txt" || log "note: rsockbench did not print its transport"
	record "3 rsockbench -verify $VERIFY_BYTES g1->g2 over rdmacore" "$crc" "$src"
fi

if want_part 4; then
	B=$BIN/netconn.test
	for dir in host-server guest-server; do
		log "4. mixed: host soft-RoCE ($HOST_IP) against g1 rdmacore, $dir, $MIX_BYTES bytes each way"
		henv=(RSOCK_PROVIDER=softroce RSOCK_LINK=udp RSOCK_PEER_TRANSPORT=rdma/softroce/udp RSOCK_PEER_BYTES=$MIX_BYTES)
		genv="RSOCK_PROVIDER=rdmacore RSOCK_PEER_TRANSPORT=rdma/rdmacore/ RSOCK_PEER_BYTES=$MIX_BYTES"
		if [ $dir = host-server ]; then
			ip netns exec "$NS" env "${henv[@]}" RSOCK_PEER_LISTEN=$HOST_IP:18720 timeout $to "$B" -test.v -test.timeout ${to}s -test.run TestPeerExchange >"$OUT/4-$dir-host.txt" 2>&1 &
			hpid=$!
			sleep 1
			gtest $G1 "$OUT/4-$dir-guest.txt" "$genv RSOCK_PEER_DIAL=$HOST_IP:18720 timeout $to ./netconn.test -test.v -test.timeout ${to}s -test.run TestPeerExchange"
			grc=$?
			wait $hpid
			hrc=$?
		else
			gtest $G1 "$OUT/4-$dir-guest.txt" "$genv RSOCK_PEER_LISTEN=$IP1:18721 timeout $to ./netconn.test -test.v -test.timeout ${to}s -test.run TestPeerExchange" &
			gpid=$!
			sleep 3
			ip netns exec "$NS" env "${henv[@]}" RSOCK_PEER_DIAL=$IP1:18721 timeout $to "$B" -test.v -test.timeout ${to}s -test.run TestPeerExchange >"$OUT/4-$dir-host.txt" 2>&1
			hrc=$?
			wait $gpid
			grc=$?
		fi
		grep -h '^exchange' "$OUT/4-$dir-host.txt" "$OUT/4-$dir-guest.txt" >&2
		record "4 mixed $dir: host softroce <-> g1 rdmacore, $MIX_BYTES each way, SHA-256" "$hrc" "$grc"
	done
fi

if want_part 5; then
	log "5a. rsockbench server (g2) / client (g1): rsock on rdmacore (rxe0) against TCP"
	gx $G2 -- "cd /mnt/state && timeout $to ./rsockbench server -provider rdmacore -sessions 1 -addr $IP2:18640" >"$OUT/5a-server.txt" 2>&1 &
	spid=$!
	sleep 3
	gx $G1 -- "cd /mnt/state && timeout $to ./rsockbench client -provider rdmacore -addr $IP2:18640 -sizes 64B,16KiB,1MiB -conns 1 -duration 2s -iters 200 -timeout 60s" >"$OUT/5a-client.txt" 2>&1
	crc=$?
	wait $spid
	src=$?
	cat "$OUT/5a-client.txt" >&2
	record "5a rsockbench client/server g1->g2, rdmacore vs TCP (functional numbers)" "$crc" "$src"

	log "5b. rsockbench local -host $IP1 -provider rdmacore in g1: both processes on rxe0 (rxe loops back), against TCP"
	gx $G1 -- "cd /mnt/state && timeout $to ./rsockbench local -host $IP1 -provider rdmacore -sizes 64B,16KiB,1MiB -conns 1 -duration 2s -iters 200 -timeout 60s -json /mnt/state/5b-local.json" >"$OUT/5b-local.txt" 2>&1
	rc=$?
	cat "$OUT/5b-local.txt" >&2
	cp "$RUN/$G1/5b-local.json" "$OUT/" 2>/dev/null
	# Every rsock record must say rdma/rdmacore/rxe0 on both sides.
	if [ $rc = 0 ]; then
		python3 - "$OUT/5b-local.json" <<'PY' >&2 || rc=transport
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rs = [r for r in recs if r["transport"] == "rsock"]
bad = [r for r in rs if r["conn_transport"] != "rdma/rdmacore/rxe0" or r["server_transport"] != "rdma/rdmacore/rxe0"]
print("5b: %d rsock records, %d not on rdma/rdmacore/rxe0 at both ends" % (len(rs), len(bad)))
sys.exit(1 if bad or not rs else 0)
PY
	fi
	record "5b rsockbench local -host $IP1 -provider rdmacore (Transport rdma/rdmacore/rxe0 both sides) vs TCP" "$rc"

	# Same sizes for rsockbench verbs and perftest: 64 KiB WRITE
	# bandwidth and 2-byte WRITE latency, 200 iterations, path MTU 1024
	# (rxe's at Ethernet MTU 1500).
	vflags="-mtu 1024 -iters 200 -timeout 60s"
	log "5c. rsockbench verbs -provider rdmacore: -local in g1, then g1 -> g2"
	gx $G1 -- "cd /mnt/state && timeout $to ./rsockbench verbs -local -provider rdmacore -roce $IP1:0 -test write_bw -size 65536 $vflags && timeout $to ./rsockbench verbs -local -provider rdmacore -roce $IP1:0 -test write_lat -size 2 $vflags" >"$OUT/5c-verbs-local.txt" 2>&1
	rc=$?
	cat "$OUT/5c-verbs-local.txt" >&2
	grep -q 'rdmacore/rxe0' "$OUT/5c-verbs-local.txt" || rc=not-rdmacore
	record "5c rsockbench verbs -local -provider rdmacore in g1 (write_bw 64KiB, write_lat 2B)" "$rc"
	for t in "write_bw -size 65536" "write_lat -size 2"; do
		tag=${t%% *}
		# The server serves one client and exits.
		pair "$OUT/5c-verbs-$tag" "cd /mnt/state && timeout $to ./rsockbench verbs -server -wait 120s -provider rdmacore -roce $IP2:0 -addr $IP2:18515 -timeout 60s" \
			"cd /mnt/state && timeout $to ./rsockbench verbs -provider rdmacore -roce $IP1:0 -addr $IP2:18515 -test $t $vflags"
		cat "$OUT/5c-verbs-$tag-client.txt" >&2
		grep -q 'rdmacore/rxe0' "$OUT/5c-verbs-$tag-client.txt" || crc=not-rdmacore
		record "5c rsockbench verbs -provider rdmacore $tag g1 -> g2" "$crc" "$src"
	done

	log "5d. the same in g1 on soft-RoCE (rsockbench verbs -local, its own UDP sockets)"
	gx $G1 -- "cd /mnt/state && timeout $to ./rsockbench verbs -local -roce $IP1:0 -test write_bw -size 65536 $vflags && timeout $to ./rsockbench verbs -local -roce $IP1:0 -test write_lat -size 2 $vflags" >"$OUT/5d-verbs-softroce.txt" 2>&1
	rc=$?
	cat "$OUT/5d-verbs-softroce.txt" >&2
	record "5d rsockbench verbs -local soft-RoCE in g1 (same sizes)" "$rc"

	log "5e. perftest on rxe0, g1 -> g2, same sizes (reference)"
	for tool in "ib_write_bw -s 65536" "ib_write_lat -s 2"; do
		tag=${tool%% *}
		pair "$OUT/5e-$tag" "timeout $to $tool -d rxe0 -x 1 -F -m 1024 -n 200" "timeout $to $tool -d rxe0 -x 1 -F -m 1024 -n 200 $IP2"
		grep -A1 '#bytes' "$OUT/5e-$tag-client.txt" >&2
		record "5e perftest $tag g1->g2 on rxe0 (reference)" "$crc" "$src"
	done
fi

if want_part 6; then
	# Last: it takes g1's eth0 down and up again.
	log "6. async events: eth0 down in g1 gives a port error that fails the QPs (ECONNRESET)"
	gtest $G1 "$OUT/6-portdown.txt" "RSOCK_RDMACORE_ADDR=$IP1 RSOCK_RDMACORE_PORTDOWN=eth0 timeout $to ./rdmacore.test -test.v -test.timeout ${to}s -test.run TestPortDownFailsQP"
	rc=$?
	grep -E 'failed:|async event|--- ' "$OUT/6-portdown.txt" >&2
	grep -q -- '--- PASS: TestPortDownFailsQP' "$OUT/6-portdown.txt" || rc=not-passed
	record "6 port down in g1 fails the QPs with the port error event" "$rc"
fi

gx $G1 -- 'rdma statistic show link rxe0/1' >"$OUT/stats-after-g1.txt" 2>&1
echo "== rxe0 counters of g1 before/after =="
cat "$OUT/stats-before-g1.txt" "$OUT/stats-after-g1.txt"
echo "== summary (logs in $OUT) =="
printf '%s\n' "${results[@]}"
echo "$(( ${#results[@]} - fail )) passed, $fail failed"
[ "$fail" = 0 ]
