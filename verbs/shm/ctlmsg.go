package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Channel control messages travel over the Unix SOCK_SEQPACKET socket,
// one per datagram, little-endian, with at most one file descriptor:
//
//	hello   version, maxQPs, arena size, nonce          + arena memfd
//	bell    (right after hello, once)                   + eventfd: the sender's doorbell
//	qpNew   qpn, slot, recv cq, send cq, pd
//	qpGone  qpn         (the owner destroyed the QP)
//	qpAck   qpn         (the peer stopped writing into its slot)
//	mrNew   rkey, pd, access, addr, length              + memfd
//	mrGone  rkey
//	ool     destination qpn, length                     + memfd
//	bind    a 128-bit binding (x, y)
const (
	msgHello  = 1
	msgBell   = 2
	msgQPNew  = 3
	msgQPGone = 4
	msgQPAck  = 5
	msgMRNew  = 6
	msgMRGone = 7
	msgOOL    = 8
	msgBind   = 9
	msgMax    = msgBind

	msgLen = 40 // every message has this length
)

// msg is a decoded control message. Which fields are set depends on typ.
type msg struct {
	typ   uint8
	a, b  uint32 // hello: version, maxQPs; qp: qpn, slot; mr: rkey, pd; ool: qpn, length
	c, d  uint32 // qpNew: recv cq, send cq; mrNew: access
	e     uint32 // qpNew: pd
	x, y  uint64 // hello: arena size, nonce; mrNew: addr, length; bind: the binding
	hasFD bool
}

// wantsFD says which message types carry exactly one descriptor.
func wantsFD(typ uint8) bool {
	switch typ {
	case msgHello, msgBell, msgMRNew, msgOOL:
		return true
	}
	return false
}

func (m *msg) encode(b *[msgLen]byte) []byte {
	clear(b[:])
	b[0] = m.typ
	le := binary.LittleEndian
	le.PutUint32(b[4:], m.a)
	le.PutUint32(b[8:], m.b)
	le.PutUint32(b[12:], m.c)
	le.PutUint32(b[16:], m.d)
	le.PutUint32(b[20:], m.e)
	le.PutUint64(b[24:], m.x)
	le.PutUint64(b[32:], m.y)
	return b[:]
}

var errMsg = errors.New("shm: malformed control message")

// decodeMsg parses a control message that arrived with nfd descriptors.
// It checks the framing only; the handler bounds the values.
func decodeMsg(b []byte, nfd int) (msg, error) {
	if len(b) != msgLen {
		return msg{}, fmt.Errorf("%w: %d bytes", errMsg, len(b))
	}
	m := msg{typ: b[0]}
	if m.typ == 0 || m.typ > msgMax || b[1] != 0 || b[2] != 0 || b[3] != 0 {
		return msg{}, fmt.Errorf("%w: type %d", errMsg, b[0])
	}
	if wantsFD(m.typ) != (nfd == 1) || nfd > 1 {
		return msg{}, fmt.Errorf("%w: type %d with %d descriptors", errMsg, m.typ, nfd)
	}
	le := binary.LittleEndian
	m.a = le.Uint32(b[4:])
	m.b = le.Uint32(b[8:])
	m.c = le.Uint32(b[12:])
	m.d = le.Uint32(b[16:])
	m.e = le.Uint32(b[20:])
	m.x = le.Uint64(b[24:])
	m.y = le.Uint64(b[32:])
	m.hasFD = nfd == 1
	return m, nil
}
