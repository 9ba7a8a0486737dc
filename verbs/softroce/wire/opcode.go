package wire

// Opcode is the BTH opcode of an RC transport packet. The top three bits
// select the transport service (000 = RC) and the low five the operation.
type Opcode uint8

// RC opcodes (IBA Table 38).
const (
	// RCSendFirst is the first packet of a multi-packet SEND.
	RCSendFirst Opcode = 0x00
	// RCSendMiddle is a middle packet of a multi-packet SEND.
	RCSendMiddle Opcode = 0x01
	// RCSendLast is the last packet of a multi-packet SEND.
	RCSendLast Opcode = 0x02
	// RCSendLastImm is the last packet of a SEND with immediate data.
	RCSendLastImm Opcode = 0x03
	// RCSendOnly is a single-packet SEND.
	RCSendOnly Opcode = 0x04
	// RCSendOnlyImm is a single-packet SEND with immediate data.
	RCSendOnlyImm Opcode = 0x05
	// RCWriteFirst is the first packet of a multi-packet RDMA WRITE.
	RCWriteFirst Opcode = 0x06
	// RCWriteMiddle is a middle packet of a multi-packet RDMA WRITE.
	RCWriteMiddle Opcode = 0x07
	// RCWriteLast is the last packet of a multi-packet RDMA WRITE.
	RCWriteLast Opcode = 0x08
	// RCWriteLastImm is the last packet of an RDMA WRITE with immediate data.
	RCWriteLastImm Opcode = 0x09
	// RCWriteOnly is a single-packet RDMA WRITE.
	RCWriteOnly Opcode = 0x0a
	// RCWriteOnlyImm is a single-packet RDMA WRITE with immediate data.
	RCWriteOnlyImm Opcode = 0x0b
	// RCReadRequest is an RDMA READ request.
	RCReadRequest Opcode = 0x0c
	// RCReadResponseFirst is the first packet of a multi-packet RDMA READ response.
	RCReadResponseFirst Opcode = 0x0d
	// RCReadResponseMiddle is a middle packet of a multi-packet RDMA READ response.
	RCReadResponseMiddle Opcode = 0x0e
	// RCReadResponseLast is the last packet of a multi-packet RDMA READ response.
	RCReadResponseLast Opcode = 0x0f
	// RCReadResponseOnly is a single-packet RDMA READ response.
	RCReadResponseOnly Opcode = 0x10
	// RCAcknowledge is an ACK or NAK.
	RCAcknowledge Opcode = 0x11
	// RCAtomicAcknowledge is the response to an atomic request.
	RCAtomicAcknowledge Opcode = 0x12
	// RCCompareSwap is an atomic compare-and-swap request.
	RCCompareSwap Opcode = 0x13
	// RCFetchAdd is an atomic fetch-and-add request.
	RCFetchAdd Opcode = 0x14
	// RCSendLastInv is the last packet of a SEND with invalidate.
	RCSendLastInv Opcode = 0x16
	// RCSendOnlyInv is a single-packet SEND with invalidate.
	RCSendOnlyInv Opcode = 0x17
)

// OpFlags describes an opcode: which extension headers follow the BTH,
// whether it carries payload, its place in a message and its operation.
type OpFlags uint32

// Opcode flags. An "only" opcode has both FlagFirst and FlagLast.
const (
	// FlagRETH means a RETH follows the BTH.
	FlagRETH OpFlags = 1 << iota
	// FlagAETH means an AETH follows the BTH.
	FlagAETH
	// FlagImm means an ImmDt header is present.
	FlagImm
	// FlagIETH means an IETH is present.
	FlagIETH
	// FlagAtomicETH means an AtomicETH follows the BTH.
	FlagAtomicETH
	// FlagAtomicAckETH means an AtomicAckETH follows the AETH.
	FlagAtomicAckETH
	// FlagPayload means the opcode carries payload.
	FlagPayload
	// FlagFirst marks the first packet of a message.
	FlagFirst
	// FlagMiddle marks a middle packet of a message.
	FlagMiddle
	// FlagLast marks the last packet of a message.
	FlagLast
	// FlagRequest marks a request (sent by the requester).
	FlagRequest
	// FlagResponse marks a response (sent by the responder).
	FlagResponse
	// FlagSend marks a SEND operation.
	FlagSend
	// FlagWrite marks an RDMA WRITE operation.
	FlagWrite
	// FlagRead marks an RDMA READ request or response.
	FlagRead
	// FlagAtomic marks an atomic request or atomic acknowledge.
	FlagAtomic
	// FlagAck marks an ACK/NAK.
	FlagAck
	// FlagECNEcho means an ECNEcho header follows the BTH.
	FlagECNEcho
	// FlagDupEcho means a DupEcho header follows the BTH.
	FlagDupEcho
	// FlagHoldEcho means a HoldEcho header follows the BTH.
	FlagHoldEcho
)

// Has reports whether all bits of g are set in f.
func (f OpFlags) Has(g OpFlags) bool { return f&g == g }

type opInfo struct {
	name  string
	flags OpFlags
	hlen  uint8
}

const (
	sendReq  = FlagRequest | FlagSend | FlagPayload
	writeReq = FlagRequest | FlagWrite | FlagPayload
	readResp = FlagResponse | FlagRead | FlagPayload
	onlyPkt  = FlagFirst | FlagLast
)

var opTable = [256]opInfo{
	RCSendFirst:          {"RC_SEND_FIRST", sendReq | FlagFirst, BTHLen},
	RCSendMiddle:         {"RC_SEND_MIDDLE", sendReq | FlagMiddle, BTHLen},
	RCSendLast:           {"RC_SEND_LAST", sendReq | FlagLast, BTHLen},
	RCSendLastImm:        {"RC_SEND_LAST_WITH_IMMEDIATE", sendReq | FlagLast | FlagImm, BTHLen + ImmDtLen},
	RCSendOnly:           {"RC_SEND_ONLY", sendReq | onlyPkt, BTHLen},
	RCSendOnlyImm:        {"RC_SEND_ONLY_WITH_IMMEDIATE", sendReq | onlyPkt | FlagImm, BTHLen + ImmDtLen},
	RCWriteFirst:         {"RC_RDMA_WRITE_FIRST", writeReq | FlagFirst | FlagRETH, BTHLen + RETHLen},
	RCWriteMiddle:        {"RC_RDMA_WRITE_MIDDLE", writeReq | FlagMiddle, BTHLen},
	RCWriteLast:          {"RC_RDMA_WRITE_LAST", writeReq | FlagLast, BTHLen},
	RCWriteLastImm:       {"RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", writeReq | FlagLast | FlagImm, BTHLen + ImmDtLen},
	RCWriteOnly:          {"RC_RDMA_WRITE_ONLY", writeReq | onlyPkt | FlagRETH, BTHLen + RETHLen},
	RCWriteOnlyImm:       {"RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", writeReq | onlyPkt | FlagRETH | FlagImm, BTHLen + RETHLen + ImmDtLen},
	RCReadRequest:        {"RC_RDMA_READ_REQUEST", FlagRequest | FlagRead | FlagRETH | onlyPkt, BTHLen + RETHLen},
	RCReadResponseFirst:  {"RC_RDMA_READ_RESPONSE_FIRST", readResp | FlagFirst | FlagAETH, BTHLen + AETHLen},
	RCReadResponseMiddle: {"RC_RDMA_READ_RESPONSE_MIDDLE", readResp | FlagMiddle, BTHLen},
	RCReadResponseLast:   {"RC_RDMA_READ_RESPONSE_LAST", readResp | FlagLast | FlagAETH, BTHLen + AETHLen},
	RCReadResponseOnly:   {"RC_RDMA_READ_RESPONSE_ONLY", readResp | onlyPkt | FlagAETH, BTHLen + AETHLen},
	RCAcknowledge:        {"RC_ACKNOWLEDGE", FlagResponse | FlagAck | FlagAETH, BTHLen + AETHLen},
	RCAtomicAcknowledge:  {"RC_ATOMIC_ACKNOWLEDGE", FlagResponse | FlagAtomic | FlagAETH | FlagAtomicAckETH, BTHLen + AETHLen + AtomicAckETHLen},
	RCCompareSwap:        {"RC_COMPARE_SWAP", FlagRequest | FlagAtomic | FlagAtomicETH | onlyPkt, BTHLen + AtomicETHLen},
	RCFetchAdd:           {"RC_FETCH_ADD", FlagRequest | FlagAtomic | FlagAtomicETH | onlyPkt, BTHLen + AtomicETHLen},
	RCSendLastInv:        {"RC_SEND_LAST_WITH_INVALIDATE", sendReq | FlagLast | FlagIETH, BTHLen + IETHLen},
	RCSendOnlyInv:        {"RC_SEND_ONLY_WITH_INVALIDATE", sendReq | onlyPkt | FlagIETH, BTHLen + IETHLen},
	RCSelectiveNAK:       {"RC_SELECTIVE_NAK", FlagResponse | FlagAck | FlagAETH | FlagPayload, BTHLen + AETHLen},
	RCECNEcho:            {"RC_ECN_ECHO", FlagResponse | FlagAck | FlagECNEcho, BTHLen + ECNEchoLen},
	RCDuplicateEcho:      {"RC_DUPLICATE_ECHO", FlagResponse | FlagAck | FlagDupEcho, BTHLen + DupEchoLen},
	RCHoldEcho:           {"RC_HOLD_ECHO", FlagResponse | FlagAck | FlagHoldEcho, BTHLen + HoldEchoLen},
}

// String returns the IBA name of the opcode without the "IB_OPCODE_"
// prefix, e.g. "RC_SEND_ONLY", or "Opcode(0x1f)" for an unknown value.
func (o Opcode) String() string {
	if n := opTable[o].name; n != "" {
		return n
	}
	return "Opcode(0x" + hex2(uint8(o)) + ")"
}

// Valid reports whether o is one of the RC opcodes defined in this package.
func (o Opcode) Valid() bool { return opTable[o].hlen != 0 }

// Flags returns the flags describing o, or 0 if o is not valid.
func (o Opcode) Flags() OpFlags { return opTable[o].flags }

// HeaderLen returns the length of the BTH plus the extension headers that
// opcode o carries, or 0 if o is not valid.
func (o Opcode) HeaderLen() int { return int(opTable[o].hlen) }
