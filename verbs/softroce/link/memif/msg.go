//go:build linux

package memif

import (
	"bytes"
	"encoding/binary"
)

// Control message framing. Every memif control message is one 128-byte
// datagram on a SOCK_SEQPACKET Unix socket: a 16-bit type, then the
// packed body of that type, then zero padding. Integers are in host byte
// order; this package supports little-endian hosts, as DPDK and VPP
// deployments are.
const (
	// MsgLen is the size of every control message.
	MsgLen = 128
	// NameLen is the size of the NUL-padded name fields.
	NameLen = 32
	// SecretLen is the size of the INIT message's secret field; a secret
	// has at most SecretLen-1 bytes, as it is NUL-terminated.
	SecretLen = 24
	// ReasonLen is the size of the DISCONNECT message's reason string.
	ReasonLen = 96

	msgBody = 2 // offset of the body after the type
)

// MsgType is the type of a control message.
type MsgType uint16

// Control message types.
const (
	MsgNone MsgType = iota
	MsgAck
	MsgHello
	MsgInit
	MsgAddRegion
	MsgAddRing
	MsgConnect
	MsgConnected
	MsgDisconnect
)

var msgTypeNames = [...]string{"NONE", "ACK", "HELLO", "INIT", "ADD_REGION", "ADD_RING", "CONNECT", "CONNECTED", "DISCONNECT"}

func (t MsgType) String() string {
	if int(t) < len(msgTypeNames) {
		return msgTypeNames[t]
	}
	return "UNKNOWN(" + itoa(int(t)) + ")"
}

// Msg is a view of a control message. Methods require len(m) >= MsgLen.
// The body views (Hello, Init, ...) alias m from byte 2 on.
type Msg []byte

// Type returns the message type.
func (m Msg) Type() MsgType { return MsgType(binary.LittleEndian.Uint16(m[0:])) }

// Reset zeroes the message and sets its type.
func (m Msg) Reset(t MsgType) {
	clear(m[:MsgLen])
	binary.LittleEndian.PutUint16(m[0:], uint16(t))
}

// Hello returns the body as a HELLO.
func (m Msg) Hello() Hello { return Hello(m[msgBody:MsgLen]) }

// Init returns the body as an INIT.
func (m Msg) Init() Init { return Init(m[msgBody:MsgLen]) }

// AddRegion returns the body as an ADD_REGION.
func (m Msg) AddRegion() AddRegion { return AddRegion(m[msgBody:MsgLen]) }

// AddRing returns the body as an ADD_RING.
func (m Msg) AddRing() AddRing { return AddRing(m[msgBody:MsgLen]) }

// Connect returns the body as a CONNECT or CONNECTED (both carry only an
// interface name).
func (m Msg) Connect() Connect { return Connect(m[msgBody:MsgLen]) }

// Disconnect returns the body as a DISCONNECT.
func (m Msg) Disconnect() Disconnect { return Disconnect(m[msgBody:MsgLen]) }

// cString returns b up to its first NUL (all of b if none).
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// putCString writes s into dst NUL-padded, truncated to len(dst)-1 bytes
// so that it stays NUL-terminated.
func putCString(dst []byte, s string) {
	n := copy(dst[:len(dst)-1], s)
	clear(dst[n:])
}

func itoa(v int) string {
	var b [20]byte
	i := len(b)
	neg := v < 0
	if neg {
		v = -v
	}
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
