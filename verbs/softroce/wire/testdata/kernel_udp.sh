#!/usr/bin/env bash
# Writes kernel_udp.hex: UDP datagrams whose checksums the Linux kernel
# computed, for TestUDPChecksum. Two network namespaces joined by a veth
# pair with checksum offload off (so that the kernel computes each UDP
# checksum in software instead of leaving a partial sum for the NIC); a
# socket in one sends datagrams of several lengths over IPv4 and IPv6 and
# a packet socket in the other captures them. Each output line is
# "name hex", the frame from the Ethernet header on. Needs root, ip(8),
# ethtool(8) and python3.
set -euo pipefail
out=$(cd "$(dirname "$0")" && pwd)/kernel_udp.hex
a=rsock-kudp-a b=rsock-kudp-b
cleanup() { ip netns del $a 2>/dev/null || true; ip netns del $b 2>/dev/null || true; }
trap cleanup EXIT
cleanup
ip netns add $a
ip netns add $b
ip link add kudp0 netns $a type veth peer name kudp1 netns $b
for ns in $a $b; do ip -n $ns link set lo up; done
ip -n $a addr add 10.0.0.1/24 dev kudp0
ip -n $b addr add 10.0.0.2/24 dev kudp1
ip -n $a addr add fd00::1/64 dev kudp0 nodad
ip -n $b addr add fd00::2/64 dev kudp1 nodad
ip netns exec $a ethtool -K kudp0 tx off >/dev/null
ip netns exec $b ethtool -K kudp1 rx off >/dev/null
ip -n $a link set kudp0 up
ip -n $b link set kudp1 up
sleep 1
ip netns exec $b python3 - "$out" $a <<'PY' &
import socket, sys, time
out = sys.argv[1]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
s.bind(("kudp1", 0))
s.settimeout(10)
frames = []
while len(frames) < 12:
    f = s.recv(65536)
    et = f[12:14]
    if et == b"\x08\x00" and f[23] == 17 and f[36:38] == b"\x12\xb7":
        frames.append(("ipv4", f))
    elif et == b"\x86\xdd" and f[20] == 17 and f[56:58] == b"\x12\xb7":
        frames.append(("ipv6", f))
with open(out, "w") as w:
    w.write("# UDP datagrams to port 4791 checksummed by the Linux kernel\n")
    w.write("# (testdata/kernel_udp.sh): name hex-of-the-Ethernet-frame\n")
    for i, (fam, f) in enumerate(frames):
        w.write("%s-%02d %s\n" % (fam, i, f.hex()))
PY
cap=$!
sleep 1
ip netns exec $a python3 - <<'PY'
import socket, time
for fam, dst in ((socket.AF_INET, "10.0.0.2"), (socket.AF_INET6, "fd00::2")):
    u = socket.socket(fam, socket.SOCK_DGRAM)
    for n in (0, 1, 13, 64, 1001, 1400):
        u.sendto(bytes((i * 7 + 1) & 0xff for i in range(n)), (dst, 4791))
        time.sleep(0.05)
PY
wait $cap
echo "wrote $out"
