//go:build linux

package hostile

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// forgedIPID is the IPv4 ID of every forged packet. The kernel replaces an
// ID of 0 on a raw socket, so a fixed non-zero one keeps the ICRC, which
// covers it, predictable.
const forgedIPID = 1

// rawSender sends forged IPv4/UDP/RoCEv2 packets from a raw socket, with
// any source address and port.
type rawSender struct {
	fd  int
	buf []byte
}

// newRawSender opens the raw socket in the calling thread's namespace.
func newRawSender() (*rawSender, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return nil, fmt.Errorf("raw socket: %w", err)
	}
	return &rawSender{fd: fd, buf: make([]byte, 0, 9216)}, nil
}

func (r *rawSender) Close() error { return unix.Close(r.fd) }

// send frames pkt (BTH onward, without ICRC) in IPv4 and UDP headers from
// src to dst, appends an ICRC, correct or deliberately wrong, and sends it.
func (r *rawSender) send(src, dst netip.AddrPort, pkt []byte, goodICRC bool) error {
	const hdr = wire.IPv4MinLen + wire.UDPLen
	n := hdr + len(pkt) + wire.ICRCLen
	b := r.buf[:n]
	wire.IPv4(b).Encode(&wire.IPv4Fields{TotalLen: uint16(n), ID: forgedIPID, Flags: wire.IPv4DontFragment,
		TTL: 64, Protocol: unix.IPPROTO_UDP, Src: src.Addr(), Dst: dst.Addr()})
	wire.UDP(b[wire.IPv4MinLen:]).Encode(src.Port(), dst.Port(), uint16(n-wire.IPv4MinLen), 0)
	copy(b[hdr:], pkt)
	icrc := wire.ComputeICRC(&wire.PseudoHeader{Src: src, Dst: dst, IPID: forgedIPID}, b[hdr:hdr+len(pkt)])
	if !goodICRC {
		icrc ^= 0x5a5a5a5a
	}
	wire.PutICRC(b[hdr+len(pkt):], icrc)
	var sa unix.SockaddrInet4
	sa.Addr = dst.Addr().As4()
	return unix.Sendto(r.fd, b, 0, &sa)
}

// sendAll sends every packet, in bursts with short pauses so that the
// receiver's socket buffer never overflows: each packet is meant to reach
// the device and be counted (a flood is sent with burst 0: no pauses).
func (r *rawSender) sendAll(src, dst netip.AddrPort, pkts [][]byte, goodICRC bool, burst int) error {
	for i, p := range pkts {
		if err := r.send(src, dst, p, goodICRC); err != nil {
			return err
		}
		if burst > 0 && (i+1)%burst == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// forger builds packets with a deterministic random source.
type forger struct {
	rnd *rand.Rand
}

func newForger(seed uint64) *forger { return &forger{rnd: rand.New(rand.NewPCG(seed, 15))} }

// garbage returns random bytes of a random length from lo to hi.
func (f *forger) garbage(lo, hi int) []byte {
	b := make([]byte, lo+f.rnd.IntN(hi-lo+1))
	for i := range b {
		b[i] = byte(f.rnd.Uint32())
	}
	return b
}

// requestOps are the requests forged; each gets plausible headers.
var requestOps = []wire.Opcode{
	wire.RCSendOnly, wire.RCSendFirst, wire.RCSendOnlyImm, wire.RCWriteOnly, wire.RCWriteFirst,
	wire.RCWriteOnlyImm, wire.RCWriteMiddle, wire.RCReadRequest, wire.RCFetchAdd, wire.RCCompareSwap,
}

// request returns a well-formed request of a random kind to qpn at psn,
// aimed at va with rkey (READ, WRITE, atomics), with up to 256 bytes of
// payload.
func (f *forger) request(qpn, psn uint32, va uint64, rkey uint32) []byte {
	op := requestOps[f.rnd.IntN(len(requestOps))]
	payload := 0
	if op.Flags().Has(wire.FlagPayload) {
		payload = 4 * (1 + f.rnd.IntN(64))
	}
	b := make([]byte, op.HeaderLen()+payload)
	wire.BTH(b).Encode(&wire.BTHFields{Opcode: op, MigReq: true, PKey: wire.DefaultPKey, DestQP: qpn, AckReq: true, PSN: psn})
	h := b[wire.BTHLen:]
	switch {
	case op == wire.RCReadRequest:
		wire.RETH(h).Encode(va, rkey, uint32(1+f.rnd.IntN(1<<20)))
	case op == wire.RCFetchAdd || op == wire.RCCompareSwap:
		wire.AtomicETH(h).Encode(va&^7, rkey, f.rnd.Uint64(), f.rnd.Uint64())
	case op == wire.RCWriteFirst || op == wire.RCWriteOnly || op == wire.RCWriteOnlyImm:
		n := uint32(payload)
		if op == wire.RCWriteFirst {
			n = uint32(payload) * 4
		}
		wire.RETH(h).Encode(va, rkey, n)
	}
	for i := op.HeaderLen(); i < len(b); i++ {
		b[i] = byte(f.rnd.Uint32())
	}
	return b
}

// respKinds are the responses forged.
var respKinds = []string{"ACK", "RNR-NAK", "seq-NAK", "access-NAK", "invalid-NAK", "selective-NAK", "READ-response", "atomic-ACK"}

// response returns a response of kind respKinds[k] to qpn at psn.
func (f *forger) response(k int, qpn, psn uint32) []byte {
	op := wire.RCAcknowledge
	var syn wire.Syndrome
	var extra []byte
	switch respKinds[k] {
	case "ACK":
		syn = wire.ACKSyndrome(31)
	case "RNR-NAK":
		syn = wire.RNRSyndrome(uint8(f.rnd.IntN(32)))
	case "seq-NAK":
		syn = wire.NAKSyndrome(wire.NAKPSNSeqErr)
	case "access-NAK":
		syn = wire.NAKSyndrome(wire.NAKRemoteAccess)
	case "invalid-NAK":
		syn = wire.NAKSyndrome(wire.NAKInvalidRequest)
	case "selective-NAK":
		op, syn = wire.RCSelectiveNAK, wire.NAKSyndrome(wire.NAKPSNSeqErr)
		extra = make([]byte, wire.SACKHeaderLen+16)
		wire.SACKInfo(extra).SetNewest((psn + 100) & wire.PSNMask)
		for i := wire.SACKHeaderLen; i < len(extra); i++ {
			extra[i] = byte(f.rnd.Uint32())
		}
	case "READ-response":
		op, syn = wire.RCReadResponseOnly, wire.ACKSyndrome(31)
		extra = make([]byte, 4*(1+f.rnd.IntN(64)))
	case "atomic-ACK":
		op, syn = wire.RCAtomicAcknowledge, wire.ACKSyndrome(31)
		extra = make([]byte, wire.AtomicAckETHLen)
	}
	b := make([]byte, wire.BTHLen+wire.AETHLen, wire.BTHLen+wire.AETHLen+len(extra))
	wire.BTH(b).Encode(&wire.BTHFields{Opcode: op, MigReq: true, PKey: wire.DefaultPKey, DestQP: qpn, PSN: psn})
	wire.AETH(b[wire.BTHLen:]).Encode(syn, f.rnd.Uint32()&wire.PSNMask)
	return append(b, extra...)
}

// ecnEcho returns an ECN echo (rsock's RC_ECN_ECHO) to qpn reporting ect
// ECN-capable and ce CE-marked packets, at a random PSN.
func (f *forger) ecnEcho(qpn, ect, ce uint32) []byte {
	b := make([]byte, wire.BTHLen+wire.ECNEchoLen)
	wire.BTH(b).Encode(&wire.BTHFields{Opcode: wire.RCECNEcho, MigReq: true, PKey: wire.DefaultPKey, DestQP: qpn, PSN: f.rnd.Uint32() & wire.PSNMask})
	wire.ECNEcho(b[wire.BTHLen:]).Encode(ect, ce)
	return b
}

// dupEcho returns a duplicate echo (rsock's RC_DUPLICATE_ECHO) to qpn
// reporting count duplicates, the newest at dupPSN, at a random PSN.
func (f *forger) dupEcho(qpn, count, dupPSN uint32) []byte {
	b := make([]byte, wire.BTHLen+wire.DupEchoLen)
	wire.BTH(b).Encode(&wire.BTHFields{Opcode: wire.RCDuplicateEcho, MigReq: true, PKey: wire.DefaultPKey, DestQP: qpn, PSN: f.rnd.Uint32() & wire.PSNMask})
	wire.DupEcho(b[wire.BTHLen:]).Encode(count, dupPSN)
	return b
}

// holdEcho returns a hold echo (rsock's RC_HOLD_ECHO) to qpn claiming a
// hold of us microseconds of the request at heldPSN, at a random PSN.
func (f *forger) holdEcho(qpn, us, heldPSN uint32) []byte {
	b := make([]byte, wire.BTHLen+wire.HoldEchoLen)
	wire.BTH(b).Encode(&wire.BTHFields{Opcode: wire.RCHoldEcho, MigReq: true, PKey: wire.DefaultPKey, DestQP: qpn, PSN: f.rnd.Uint32() & wire.PSNMask})
	wire.HoldEcho(b[wire.BTHLen:]).Encode(us, heldPSN)
	return b
}

// psnNear returns a PSN from base+lo to base+hi (modulo 2^24; lo and hi
// may be negative).
func (f *forger) psnNear(base uint32, lo, hi int) uint32 {
	return uint32(int(base)+lo+f.rnd.IntN(hi-lo+1)) & wire.PSNMask
}

// qpnGuess returns a random QPN that is none of live.
func (f *forger) qpnGuess(live ...uint32) uint32 {
	for {
		q := f.rnd.Uint32() & wire.PSNMask
		ok := true
		for _, l := range live {
			ok = ok && q != l
		}
		if ok {
			return q
		}
	}
}
