#!/usr/bin/env python3
"""icrc_check.py FILE.pcap: recompute the RoCEv2 ICRC of every UDP packet
in a classic pcap of Ethernet frames (IPv4 or IPv6) and compare it with the
last four bytes of the UDP payload. Prints "icrc ok=N bad=M skipped=K" and
exits 1 if any ICRC is bad or no packet was checked.

An implementation independent of rsock's Go code (IBA Annex A17, as
Linux rdma_rxe computes it): CRC-32 (zlib) over 8 bytes of 0xff, the IP
header with its variant fields set to ones (IPv4: TOS, TTL, checksum;
IPv6: traffic class, flow label, hop limit), the UDP header with the
checksum set to ones, the BTH with byte 4 set to ones, and the rest up to
the ICRC; the ICRC is sent least significant byte first.
"""
import struct
import sys
import zlib


def records(path):
    with open(path, 'rb') as f:
        head = f.read(24)
        magic = head[:4]
        if magic in (b'\xd4\xc3\xb2\xa1', b'\x4d\x3c\xb2\xa1'):
            order = '<'
        elif magic in (b'\xa1\xb2\xc3\xd4', b'\xa1\xb2\x3c\x4d'):
            order = '>'
        else:
            sys.exit('%s: not a classic pcap file' % path)
        if struct.unpack(order + 'I', head[20:24])[0] != 1:
            sys.exit('%s: not Ethernet frames' % path)
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            _, _, incl, orig = struct.unpack(order + 'IIII', rec)
            data = f.read(incl)
            if len(data) < incl:
                sys.exit('%s: truncated record' % path)
            yield data, incl == orig


def check(frame):
    """True or False for a RoCEv2 frame's ICRC, None if not UDP."""
    ethertype = frame[12:14]
    if ethertype == b'\x08\x00':
        ihl = (frame[14] & 15) * 4
        if frame[23] != 17:
            return None
        ip = bytearray(frame[14:14 + ihl])
        ip[1] = 0xff
        ip[8] = 0xff
        ip[10:12] = b'\xff\xff'
    elif ethertype == b'\x86\xdd':
        ihl = 40
        if frame[20] != 17:
            return None
        ip = bytearray(frame[14:54])
        ip[0] |= 0x0f
        ip[1:4] = b'\xff\xff\xff'
        ip[7] = 0xff
    else:
        return None
    udp = bytearray(frame[14 + ihl:22 + ihl])
    udp[6:8] = b'\xff\xff'
    ulen = struct.unpack('!H', udp[4:6])[0]
    payload = bytearray(frame[22 + ihl:14 + ihl + ulen])
    if len(payload) < 16:
        return False
    body, got = payload[:-4], bytes(payload[-4:])
    body[4] = 0xff
    crc = zlib.crc32(b'\xff' * 8 + bytes(ip) + bytes(udp) + bytes(body))
    return struct.pack('<I', crc) == got


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    ok = bad = skipped = 0
    for frame, whole in records(sys.argv[1]):
        res = check(frame) if whole else None
        if res is None:
            skipped += 1
        elif res:
            ok += 1
        else:
            bad += 1
    print('icrc ok=%d bad=%d skipped=%d' % (ok, bad, skipped))
    sys.exit(1 if bad or not ok else 0)


if __name__ == '__main__':
    main()
