// Package wire encodes and decodes the InfiniBand transport headers carried
// in RoCEv2 (RDMA over Converged Ethernet, version 2) UDP datagrams, for the
// Reliable Connected (RC) service used by the soft-RoCE engine.
//
// In the style of gVisor's pkg/tcpip/header, each header is a named byte
// slice (BTH, RETH, AETH, ImmDt, IETH, AtomicETH, AtomicAckETH) with accessor
// methods that read fields in place and encoder methods that write them in
// place. Nothing in this package copies packet data or allocates: Parse
// returns views into the caller's buffer, and ComputeICRC works on stack
// copies of the few masked header bytes.
//
// A RoCEv2 UDP payload is laid out as
//
//	BTH | extension headers (by opcode) | payload | pad (0-3) | ICRC (4)
//
// Parse handles everything from the BTH through the pad; the ICRC is checked
// and stripped by the link (see ComputeICRC and ComputeICRCFromHeaders).
// All multi-byte header fields are big-endian; only the ICRC goes on the
// wire least significant byte first.
package wire

// Header lengths in bytes.
const (
	// BTHLen is the length of the Base Transport Header.
	BTHLen = 12
	// RETHLen is the length of the RDMA Extended Transport Header.
	RETHLen = 16
	// AETHLen is the length of the ACK Extended Transport Header.
	AETHLen = 4
	// ImmDtLen is the length of the Immediate Data header.
	ImmDtLen = 4
	// IETHLen is the length of the Invalidate Extended Transport Header.
	IETHLen = 4
	// AtomicETHLen is the length of the Atomic Extended Transport Header.
	AtomicETHLen = 28
	// AtomicAckETHLen is the length of the Atomic ACK Extended Transport Header.
	AtomicAckETHLen = 8
	// ICRCLen is the length of the Invariant CRC trailer.
	ICRCLen = 4
)

// DefaultPKey is the default partition key (full membership, default partition).
const DefaultPKey = 0xffff

// PSNMask masks a packet sequence number (and a QPN or MSN) to its 24 bits.
const PSNMask = 0xffffff
