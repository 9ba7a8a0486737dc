#!/usr/bin/env bash
# Interop of rsockbench with rdma-core's ibv_rc_pingpong and perftest's
# ib_send_bw, ib_write_bw, ib_read_bw and ib_write_lat, on the Linux
# kernel's rxe, in the qemu guest of ../shared/rxe-guest (relative to the
# repository root). Not part of .ci/run: it needs root and minutes of
# emulation. Run from anywhere:  test/interop/rxe.sh
#
# Matrix: for each program, their server in the guest + our client on the
# host side of the guest's bridge (in netns rxelab, 10.99.0.1), and our
# server + their client, at MTU 1024 and 4096, sizes 1, 4096, 65536 and
# 1 MiB. A case passes when both sides exit 0 and report the same counts:
# ibv_rc_pingpong size*iters*2 bytes on both sides; perftest the same
# "#bytes #iterations" row on both sides. At the end the rxe counters of
# sequence errors and retry failures must not have moved, nor, for the
# perftest programs, the duplicate and retry counters; the ICRC of every
# captured packet is recomputed and one exchange per program is decoded.
#
# perftest runs with -u 18 (a 1 s local ACK timeout) on both sides: rxe
# re-arms its retransmit timer only while requests are outstanding and
# never stops it, so a timer left from one message can fire 67 ms later
# while the next is in flight and make rxe resend it (completer_retry_err)
# although every packet was acknowledged; under TCG a guest stall can also
# outlast 67 ms. ibv_rc_pingpong has no such option: its retries are
# reported, not failed.
#
# LINK=dpdk runs our side on the dpdk link instead of a UDP socket: a
# DPDK net_af_packet port on the guest's bridge (which the kernel shares:
# same MAC and IP), Ethernet, IP, UDP, ARP and the full ICRC check in user
# space. rsockbench is then built with -tags dpdk (libdpdk-dev) and every
# case must also report ICRCUnverified:0 in its counters: rxe's ICRC was
# checked on every packet (the udp link cannot, and reports each of rxe's
# packets unverified, so this also shows the dpdk link carried them).
#
# Environment: LINK (udp | dpdk), RXE_GUEST (g1), TOOLS (all five), MTUS ("1024 4096"),
# SIZES ("1 4096 65536 1048576"), ITERS (10; 1 MiB uses BIG_ITERS, 5),
# OUT (/tmp/rxe-interop), CAPTURE (1: tshark the first case of each
# program into $OUT/<program>.pcap and decode it), KEEP_GUEST (1: leave
# the guest running), RXE_NETNS and RXE_BRIDGE (rxelab, rxebr0: the
# namespace and bridge, as ../shared/rxe-guest names them).
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
BIG_ITERS=${BIG_ITERS:-5}
TOOLS=${TOOLS:-"ibv_rc_pingpong ib_send_bw ib_write_bw ib_read_bw ib_write_lat"}
OUT=${OUT:-/tmp/rxe-interop}
CAPTURE=${CAPTURE:-1}
IMG=${RXE_IMG:-/var/tmp/rxe-guest/img}
RUN=${RXE_RUN:-/tmp/rxe-guest}
NS=${RXE_NETNS:-rxelab}
BR=${RXE_BRIDGE:-rxebr0}
LINK=${LINK:-udp}
HOST_IP=${RXE_HOST_IP:-10.99.0.1}
GUEST_IP=10.99.0.1${G#g}
CASE_TIMEOUT=${CASE_TIMEOUT:-180}
mkdir -p "$OUT"
log() { echo "[rxe-interop $(date +%T)] $*" >&2; }

if [ ! -f "$IMG/vmlinux" ] || [ ! -f "$IMG/initrd.img" ] || [ ! -d "$IMG/rootfs/usr" ]; then
	log "building the guest image into $IMG"
	"$T/build-image.sh" "$IMG" || { echo "FAIL: build-image.sh"; exit 1; }
fi

log "building rsockbench (link $LINK)"
BIN=$OUT/rsockbench
tags=()
case $LINK in
udp) ;;
dpdk) tags=(-tags dpdk) ;;
*) echo "FAIL: LINK=$LINK: want udp or dpdk"; exit 1 ;;
esac
(cd "$root" && go build "${tags[@]}" -o "$BIN" ./cmd/rsockbench) || { echo "FAIL: go build"; exit 1; }

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
# host runs our side in the namespace, on the link LINK names. The dpdk
# link's MTU is the guest's Ethernet MTU (the bridge's already).
host() { ip netns exec "$NS" "${hostenv[@]}" timeout "$CASE_TIMEOUT" "$BIN" "$@"; }
hostenv=(env)
if [ "$LINK" = dpdk ]; then
	hostenv+=(RSOCK_LINK=dpdk "RSOCK_DPDK_ARGS=--no-huge -m 256 --no-pci --no-telemetry --log-level=lib.eal:warning"
		"RSOCK_DPDK_PORT=net_af_packet0,iface=$BR"
		"RSOCK_DPDK_IP=$HOST_IP/24" "RSOCK_DPDK_MTU=$need_mtu")
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

# row_of prints the "#bytes #iterations" of a perftest table.
row_of() { awk '/#bytes/ { getline; print $1, $2; exit }' "$1"; }

results=()
fail=0
port=18515
# The guest runs under emulation and drains its tap slowly: a burst toward
# it (the 1 MiB READ responses of ib_read_bw at MTU 1024) overflows the
# tap's default queue of 1000 packets. A longer queue keeps clean runs
# clean; drops that still happen are counted (tapdrops) and explain any
# retry of rxe's in the same run.
ip netns exec "$NS" ip link set "rxt-$G" txqueuelen 20000
t0=$SECONDS
tapdrops() { ip netns exec "$NS" cat "/sys/class/net/rxt-$G/statistics/tx_dropped"; }

# counter prints the value of a named rxe counter from a stats file.
counter() { tr ' ' '\n' <"$1" | awk -v k="$2" '$0 == k { getline; print; exit }'; }
stats() { gx "$G" -- 'rdma statistic show link rxe0/1' >"$1" 2>&1; }

notes=()
for tool in $TOOLS; do
	first=1
	stats "$OUT/stats-before-$tool.txt"
	drops0=$(tapdrops)
	for mtu in $MTUS; do
		for size in $SIZES; do
			n=$ITERS
			[ "$size" -ge 1048576 ] && n=$BIG_ITERS
			for dir in their-server our-server; do
				port=$((port + 1))
				tag=$tool-$dir-m$mtu-s$size
				cap=
				if [ "$first" = 1 ] && [ "$CAPTURE" = 1 ] && command -v tshark >/dev/null; then
					ip netns exec "$NS" timeout 120 tshark -q -i "rxt-$G" -F pcap -f 'udp port 4791' -c 80 -w "$OUT/$tool.pcap" >"$OUT/$tool.tshark.log" 2>&1 &
					cap=$!
					sleep 2
				fi
				first=0
				log "$tag: n=$n"
				if [ "$tool" = ibv_rc_pingpong ]; then
					mode=rc-pingpong
					common=(-g 1 -e -m "$mtu" -s "$size" -n "$n" -p "$port")
					theirs=(ibv_rc_pingpong -d rxe0 "${common[@]}")
					want=$((size * n * 2))
				else
					mode=$tool
					common=(-u 18 -m "$mtu" -s "$size" -n "$n" -p "$port")
					theirs=("$tool" -d rxe0 -F "${common[@]}")
					want="$size $n"
				fi
				if [ $dir = their-server ]; then
					gx -t "$CASE_TIMEOUT" "$G" -- "timeout $((CASE_TIMEOUT - 5)) ${theirs[*]}" >"$OUT/$tag.guest" 2>&1 &
					gpid=$!
					hrc=1
					for _ in $(seq 60); do
						host "$mode" -v "${common[@]}" "$GUEST_IP" >"$OUT/$tag.host" 2>&1
						hrc=$?
						grep -q "couldn't connect" "$OUT/$tag.host" || break
						sleep 0.5
					done
					wait $gpid
					grc=$?
				else
					host "$mode" -v -roce "$HOST_IP:4791" "${common[@]}" >"$OUT/$tag.host" 2>&1 &
					hpid=$!
					sleep 0.5
					gx -t "$CASE_TIMEOUT" "$G" -- "timeout $((CASE_TIMEOUT - 5)) ${theirs[*]} $HOST_IP" >"$OUT/$tag.guest" 2>&1
					grc=$?
					wait $hpid
					hrc=$?
				fi
				[ -n "$cap" ] && { sleep 1; kill "$cap" 2>/dev/null; wait "$cap" 2>/dev/null; }
				if [ "$tool" = ibv_rc_pingpong ]; then
					hb=$(bytes_of "$OUT/$tag.host")
					gb=$(bytes_of "$OUT/$tag.guest")
				else
					hb=$(row_of "$OUT/$tag.host")
					gb=$(row_of "$OUT/$tag.guest")
				fi
				st=PASS
				unv=$(grep -oE 'ICRCUnverified:[0-9]+' "$OUT/$tag.host" | head -1 | cut -d: -f2)
				recv=$(grep -oE 'RecvPackets:[0-9]+' "$OUT/$tag.host" | head -1 | cut -d: -f2)
				if [ "$hrc" != 0 ] || [ "$grc" != 0 ] || [ "${hb:-x}" != "$want" ] || [ "${gb:-x}" != "$want" ] ||
					{ [ "$LINK" = dpdk ] && { [ "${unv:-x}" != 0 ] || [ "${recv:-0}" = 0 ]; }; }; then
					st=FAIL
					fail=$((fail + 1))
				fi
				results+=("$(printf '%-4s %-15s %-12s mtu=%-4s size=%-7s iters=%-3s rsock_rc=%-3s rxe_rc=%-3s rsock=%-10s rxe=%-10s want=%s icrc_unverified=%s/%s' \
					$st "$tool" $dir "$mtu" "$size" "$n" "$hrc" "$grc" "${hb:--}" "${gb:--}" "$want" "${unv:--}" "${recv:--}")")
				log "${results[-1]}"
			done
		done
	done
	stats "$OUT/stats-after-$tool.txt"
	drops=$(( $(tapdrops) - drops0 ))
	must=(out_of_seq_request rcvd_seq_err retry_exceeded_err retry_rnr_exceeded_err send_err)
	may=()
	if [ "$tool" = ibv_rc_pingpong ]; then
		may=(duplicate_request completer_retry_err)
	else
		must+=(duplicate_request completer_retry_err)
	fi
	for c in "${must[@]}" "${may[@]}"; do
		d=$(( $(counter "$OUT/stats-after-$tool.txt" $c) - $(counter "$OUT/stats-before-$tool.txt" $c) ))
		[ "$d" = 0 ] && continue
		if [[ " ${must[*]} " == *" $c "* ]] && { [ "$drops" = 0 ] || [[ "$c" != completer_retry_err && "$c" != duplicate_request ]]; }; then
			results+=("FAIL $tool: rxe counter $c moved by $d")
			fail=$((fail + 1))
		else
			notes+=("note $tool: rxe counter $c moved by $d (the tap toward the guest dropped $drops packets)")
		fi
	done
done

gx "$G" -- 'rdma statistic show link rxe0/1' >"$OUT/stats-after.txt" 2>&1
echo "== rxe counters before =="; cat "$OUT/stats-before.txt"
echo "== rxe counters after ==";  cat "$OUT/stats-after.txt"
for f in "$OUT"/*.pcap; do
	[ -f "$f" ] || continue
	echo "== $(basename "$f"): ICRC check and decode =="
	python3 "$T/icrc_check.py" "$f"
	tshark -r "$f" -T fields -E separator=' ' -e frame.number -e ip.src -e ip.dst -e udp.srcport -e infiniband.bth.opcode \
		-e infiniband.bth.destqp -e infiniband.bth.psn -e infiniband.bth.a -e infiniband.aeth.syndrome -e infiniband.aeth.msn \
		-e infiniband.reth.va -e infiniband.reth.r_key -e infiniband.reth.dmalen | head -24
done
echo "== summary (logs in $OUT) =="
printf '%s\n' "${results[@]}" "${notes[@]}"
echo "$(( ${#results[@]} - fail )) passed, $fail failed (link $LINK, $((SECONDS - t0)) s)"
[ "$fail" = 0 ]
