#!/usr/bin/env bash
# Interop of rsockbench rc-pingpong with rdma-core's ibv_rc_pingpong on the
# Linux kernel's rxe, in the qemu guest of ../shared/rxe-guest (relative to
# the repository root). Not part of .ci/run: it needs root and minutes of
# emulation. Run from anywhere:  test/interop/rxe.sh
#
# Matrix: their server in the guest + our client on the host side of the
# guest's bridge (in netns rxelab, 10.99.0.1), and our server + their client,
# at MTU 1024 and 4096, sizes 1, 4096, 65536 and 1 MiB. A case passes when
# both sides exit 0 and both report size*iters*2 bytes.
#
# Environment: RXE_GUEST (g1), MTUS ("1024 4096"), SIZES ("1 4096 65536
# 1048576"), ITERS (10; 1 MiB uses BIG_ITERS, 3), OUT (/tmp/rxe-interop),
# CAPTURE (1: tshark/tcpdump the first case into $OUT/first.pcap),
# KEEP_GUEST (1: leave the guest running).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
T=$root/../shared/rxe-guest
if [ ! -d "$T" ]; then
	echo "SKIP: ../shared/rxe-guest not present"
	exit 0
fi
T=$(cd "$T" && pwd)
G=${RXE_GUEST:-g1}
MTUS=${MTUS:-"1024 4096"}
SIZES=${SIZES:-"1 4096 65536 1048576"}
ITERS=${ITERS:-10}
BIG_ITERS=${BIG_ITERS:-3}
OUT=${OUT:-/tmp/rxe-interop}
CAPTURE=${CAPTURE:-1}
IMG=${RXE_IMG:-/var/tmp/rxe-guest/img}
RUN=${RXE_RUN:-/tmp/rxe-guest}
NS=${RXE_NETNS:-rxelab}
HOST_IP=${RXE_HOST_IP:-10.99.0.1}
GUEST_IP=10.99.0.1${G#g}
CASE_TIMEOUT=${CASE_TIMEOUT:-180}
mkdir -p "$OUT"
log() { echo "[rxe-interop $(date +%T)] $*" >&2; }

if [ ! -f "$IMG/vmlinux" ] || [ ! -f "$IMG/initrd.img" ] || [ ! -d "$IMG/rootfs/usr" ]; then
	log "building the guest image into $IMG"
	"$T/build-image.sh" "$IMG" || { echo "FAIL: build-image.sh"; exit 1; }
fi

log "building rsockbench"
BIN=$OUT/rsockbench
(cd "$root" && go build -o "$BIN" ./cmd/rsockbench) || { echo "FAIL: go build"; exit 1; }

guest_up() { [ -f "$RUN/$G/ready" ] && [ -f "$RUN/$G/qemu.pid" ] && kill -0 "$(cat "$RUN/$G/qemu.pid")" 2>/dev/null; }
need_mtu=1500
for m in $MTUS; do [ "$m" -gt 1024 ] && need_mtu=4200; done
if guest_up; then
	log "reusing running guest $G"
else
	log "starting guest $G (eth MTU $need_mtu)"
	mtuopt=()
	[ "$need_mtu" != 1500 ] && mtuopt=(--mtu "$need_mtu")
	"$T/start-guest.sh" -n "$G" "${mtuopt[@]}" -q || { echo "FAIL: start-guest.sh"; exit 1; }
fi
cleanup() {
	if [ "${KEEP_GUEST:-0}" != 1 ]; then
		log "stopping guest $G"
		# The last guest also takes the namespace and bridge it made.
		"$T/stop-guest.sh" "$G" --all-netns >/dev/null 2>&1
	fi
}
trap cleanup EXIT

gx() { "$T/guest-exec.sh" "$@"; }
gx "$G" -- 'ibv_devinfo -d rxe0 | grep -E "state|active_mtu"; ip -br link show eth0' >"$OUT/devinfo.txt" 2>&1
gx "$G" -- 'rdma statistic show link rxe0/1' >"$OUT/stats-before.txt" 2>&1

bytes_of() { grep -oE '^[0-9]+ bytes in' "$1" | head -1 | cut -d' ' -f1; }

results=()
fail=0
port=18515
first=1
for mtu in $MTUS; do
	for size in $SIZES; do
		n=$ITERS
		[ "$size" -ge 1048576 ] && n=$BIG_ITERS
		want=$((size * n * 2))
		for dir in their-server our-server; do
			port=$((port + 1))
			tag=$dir-m$mtu-s$size
			cap=
			if [ "$first" = 1 ] && [ "$CAPTURE" = 1 ] && command -v tshark >/dev/null; then
				ip netns exec "$NS" timeout 120 tshark -q -i rxebr0 -f 'udp port 4791' -c 60 -w "$OUT/first.pcap" >"$OUT/tshark.log" 2>&1 &
				cap=$!
				sleep 2
			fi
			first=0
			log "$tag: n=$n"
			common=(-g 1 -e -m "$mtu" -s "$size" -n "$n" -p "$port")
			if [ $dir = their-server ]; then
				gx -t "$CASE_TIMEOUT" "$G" -- "timeout $((CASE_TIMEOUT - 5)) ibv_rc_pingpong -d rxe0 ${common[*]}" >"$OUT/$tag.guest" 2>&1 &
				gpid=$!
				hrc=1
				for _ in $(seq 40); do
					ip netns exec "$NS" timeout "$CASE_TIMEOUT" "$BIN" rc-pingpong -v "${common[@]}" "$GUEST_IP" >"$OUT/$tag.host" 2>&1
					hrc=$?
					grep -q "couldn't connect" "$OUT/$tag.host" || break
					sleep 0.5
				done
				wait $gpid
				grc=$?
			else
				ip netns exec "$NS" timeout "$CASE_TIMEOUT" "$BIN" rc-pingpong -v -roce "$HOST_IP:4791" "${common[@]}" >"$OUT/$tag.host" 2>&1 &
				hpid=$!
				sleep 0.5
				gx -t "$CASE_TIMEOUT" "$G" -- "timeout $((CASE_TIMEOUT - 5)) ibv_rc_pingpong -d rxe0 ${common[*]} $HOST_IP" >"$OUT/$tag.guest" 2>&1
				grc=$?
				wait $hpid
				hrc=$?
			fi
			[ -n "$cap" ] && { sleep 1; kill "$cap" 2>/dev/null; wait "$cap" 2>/dev/null; }
			hb=$(bytes_of "$OUT/$tag.host")
			gb=$(bytes_of "$OUT/$tag.guest")
			st=PASS
			if [ "$hrc" != 0 ] || [ "$grc" != 0 ] || [ "${hb:-x}" != "$want" ] || [ "${gb:-x}" != "$want" ]; then
				st=FAIL
				fail=$((fail + 1))
			fi
			results+=("$(printf '%-4s %-12s mtu=%-4s size=%-7s iters=%-3s rsock_rc=%-3s rxe_rc=%-3s rsock_bytes=%-9s rxe_bytes=%-9s want=%s' \
				$st $dir "$mtu" "$size" "$n" "$hrc" "$grc" "${hb:--}" "${gb:--}" "$want")")
			log "${results[-1]}"
		done
	done
done

gx "$G" -- 'rdma statistic show link rxe0/1' >"$OUT/stats-after.txt" 2>&1
echo "== rxe counters before =="; cat "$OUT/stats-before.txt"
echo "== rxe counters after ==";  cat "$OUT/stats-after.txt"
echo "== summary (logs in $OUT) =="
printf '%s\n' "${results[@]}"
echo "$(( ${#results[@]} - fail )) passed, $fail failed"
[ "$fail" = 0 ]
