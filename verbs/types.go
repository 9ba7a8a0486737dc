package verbs

import (
	"fmt"
	"net/netip"
)

// RoCEv2Port is the IANA UDP destination port of RoCEv2, the one port an
// RNIC sends to and listens on. It is defined here once; every package
// that names the port uses this constant.
const RoCEv2Port = 4791

// GID is a 128-bit global identifier. For RoCEv2 over IPv4 it is the
// IPv4-mapped IPv6 address (::ffff:a.b.c.d).
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of an IP address.
func GIDFromAddr(a netip.Addr) GID {
	if a.Is4() {
		a = netip.AddrFrom16(a.As16())
	}
	return GID(a.As16())
}

// Addr returns the IP address the GID stands for, unmapped for IPv4.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// String formats the GID as an IP address.
func (g GID) String() string { return g.Addr().String() }

// Access is a set of memory access permissions (ibv_access_flags).
type Access uint32

// Access flags, numbered as in libibverbs.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
)

// Has reports whether every flag in f is set in a.
func (a Access) Has(f Access) bool { return a&f == f }

// MTU is a path MTU code (ibv_mtu).
type MTU uint8

// Path MTU codes, numbered as in libibverbs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, or 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// MTUFromBytes returns the largest MTU code not above n bytes, or 0 if n < 256.
func MTUFromBytes(n int) MTU {
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m
		}
	}
	return 0
}

// String formats the MTU in bytes.
func (m MTU) String() string {
	if b := m.Bytes(); b != 0 {
		return fmt.Sprint(b)
	}
	return fmt.Sprintf("MTU(%d)", uint8(m))
}

// QPState is a queue pair state (ibv_qp_state).
type QPState uint8

// Queue pair states, numbered as in libibverbs.
const (
	QPSReset QPState = iota
	QPSInit
	QPSRTR
	QPSRTS
	QPSSQD
	QPSSQE
	QPSErr
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// String returns the libibverbs name of the state.
func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// PortState is the state of a device port (ibv_port_state).
type PortState uint8

// Port states, numbered as in libibverbs.
const (
	PortNop    PortState = 0
	PortDown   PortState = 1
	PortInit   PortState = 2
	PortArmed  PortState = 3
	PortActive PortState = 4
)

// PortAttr describes a device port.
type PortAttr struct {
	State     PortState
	MaxMTU    MTU
	ActiveMTU MTU
	GIDs      []GID
}

// WROpcode is a send work request opcode (ibv_wr_opcode).
type WROpcode uint8

// Send work request opcodes, numbered as in libibverbs.
const (
	WRRDMAWrite        WROpcode = 0
	WRRDMAWriteWithImm WROpcode = 1
	WRSend             WROpcode = 2
	WRSendWithImm      WROpcode = 3
	WRRDMARead         WROpcode = 4
	WRAtomicCmpAndSwp  WROpcode = 5
	WRAtomicFetchAdd   WROpcode = 6
)

var wrOpcodeNames = [...]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD"}

// String returns the libibverbs name of the opcode.
func (o WROpcode) String() string {
	if int(o) < len(wrOpcodeNames) {
		return wrOpcodeNames[o]
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// SendFlags modify a send work request (ibv_send_flags).
type SendFlags uint32

// Send flags, numbered as in libibverbs.
const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
)

// SGE is one scatter/gather element: Length bytes at virtual address Addr
// inside the memory region whose local key is LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request (ibv_send_wr).
type SendWR struct {
	// ID is returned in the completion.
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	// SGL is the local data. With SendInline the bytes are copied at post
	// time and the keys are not checked.
	SGL []SGE
	// Imm is the immediate data of the *_WITH_IMM opcodes, in host order.
	Imm uint32
	// RemoteAddr and RKey name the remote memory of RDMA and atomic
	// operations.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare value of CMP_AND_SWP or the addend of
	// FETCH_AND_ADD; Swap is the swap value of CMP_AND_SWP.
	CompareAdd uint64
	Swap       uint64
}

// RecvWR is a receive work request (ibv_recv_wr).
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WCStatus is a work completion status (ibv_wc_status).
type WCStatus uint8

// Completion statuses, numbered as in libibverbs.
const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocEECOpErr
	WCLocProtErr
	WCWRFlushErr
	WCMWBindErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCLocRDDViolErr
	WCRemInvRDReqErr
	WCRemAbortErr
	WCInvEECNErr
	WCInvEECStateErr
	WCFatalErr
	WCRespTimeoutErr
	WCGeneralErr
)

var wcStatusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "remote invalid request error", "remote access error",
	"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
	"local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error",
}

// String returns the text of ibv_wc_status_str.
func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// WCOpcode says what a completion completed (ibv_wc_opcode).
type WCOpcode uint8

// Completion opcodes, numbered as in libibverbs.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

// String returns the libibverbs-style name of the opcode.
func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCFlags qualify a completion (ibv_wc_flags).
type WCFlags uint8

// Completion flags, numbered as in libibverbs.
const (
	WCWithImm WCFlags = 1 << 1
)

// WC is a work completion (ibv_wc).
type WC struct {
	WRID   uint64
	Status WCStatus
	Opcode WCOpcode
	Flags  WCFlags
	// ByteLen is the number of bytes received (receive completions) or
	// read (RDMA READ).
	ByteLen uint32
	// Imm is the immediate data in host order when Flags has WCWithImm.
	Imm uint32
	// QPN is the local queue pair that completed the request.
	QPN uint32
	// VendorErr is a provider-specific detail for failed completions.
	VendorErr uint32
}

// String formats the completion for logs and test failures.
func (wc WC) String() string {
	return fmt.Sprintf("wc{id=%d qpn=%#x %v %v len=%d imm=%#x flags=%#x}", wc.WRID, wc.QPN, wc.Opcode, wc.Status, wc.ByteLen, wc.Imm, wc.Flags)
}
