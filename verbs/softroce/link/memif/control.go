//go:build linux

package memif

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// ErrProtocol reports a control message that breaks the protocol:
// malformed, unexpected in the current state, or with invalid contents.
var ErrProtocol = errors.New("memif: protocol error")

// DisconnectError is the reason the peer gave in a DISCONNECT message.
type DisconnectError struct {
	Code   uint32
	Reason string
}

func (e *DisconnectError) Error() string {
	return fmt.Sprintf("memif: peer disconnected: %q (code %d)", e.Reason, e.Code)
}

// maxRecvFDs is how many descriptors one control message may carry
// before the kernel truncates the rest (and closes them); we accept one.
const maxRecvFDs = 4

// control is one end of a control channel: a SOCK_SEQPACKET Unix socket
// carrying MsgLen-byte messages, some with a file descriptor.
type control struct {
	c   *net.UnixConn
	in  [MsgLen + 1]byte // one spare byte detects oversized messages
	out [MsgLen]byte
	oob [64]byte
}

// send writes m, passing fd along if fd >= 0.
func (c *control) send(m Msg, fd int) error {
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	n, _, err := c.c.WriteMsgUnix(m[:MsgLen], oob, nil)
	if err != nil {
		return fmt.Errorf("memif: sending %v: %w", m.Type(), err)
	}
	if n != MsgLen {
		return fmt.Errorf("memif: sending %v: short write of %d bytes", m.Type(), n)
	}
	return nil
}

// sendMsg builds a message of type t in c.out with fill and sends it.
func (c *control) sendMsg(t MsgType, fd int, fill func(Msg)) error {
	m := Msg(c.out[:])
	m.Reset(t)
	if fill != nil {
		fill(m)
	}
	return c.send(m, fd)
}

// disconnect sends a DISCONNECT with reason, best effort.
func (c *control) disconnect(reason string) {
	c.c.SetWriteDeadline(time.Now().Add(time.Second))
	c.sendMsg(MsgDisconnect, -1, func(m Msg) { m.Disconnect().Encode(0, reason) })
}

// recv reads one message, waiting until deadline (zero: no deadline). It
// returns the message (a view of c.in, valid until the next recv) and the
// descriptor that came with it, or -1; the caller owns that descriptor.
// A message of the wrong size, with more than one descriptor, or of an
// unknown type is an ErrProtocol; a DISCONNECT is a *DisconnectError.
func (c *control) recv(deadline time.Time) (Msg, int, error) {
	if err := c.c.SetReadDeadline(deadline); err != nil {
		return nil, -1, fmt.Errorf("memif: control socket: %w", err)
	}
	n, oobn, flags, _, err := c.c.ReadMsgUnix(c.in[:], c.oob[:unix.CmsgSpace(4*maxRecvFDs)])
	fds := parseRights(c.oob[:oobn])
	if err != nil {
		closeAll(fds)
		if errors.Is(err, io.EOF) {
			return nil, -1, fmt.Errorf("memif: control socket closed by peer: %w", err)
		}
		return nil, -1, fmt.Errorf("memif: control socket: %w", err)
	}
	if n == 0 && oobn == 0 {
		return nil, -1, fmt.Errorf("memif: control socket closed by peer: %w", net.ErrClosed)
	}
	m, err := parseMsg(c.in[:], n, flags)
	if err == nil && len(fds) > 1 {
		err = fmt.Errorf("%w: %v message carries %d descriptors", ErrProtocol, m.Type(), len(fds))
	}
	if err != nil {
		closeAll(fds)
		return nil, -1, err
	}
	if m.Type() == MsgDisconnect {
		closeAll(fds)
		d := m.Disconnect()
		return m, -1, &DisconnectError{Code: d.Code(), Reason: d.Reason()}
	}
	fd := -1
	if len(fds) == 1 {
		fd = fds[0]
	}
	return m, fd, nil
}

// parseMsg checks a received datagram of n bytes (recvmsg flags given)
// held at the start of b, and returns it as a Msg.
func parseMsg(b []byte, n, flags int) (Msg, error) {
	if n != MsgLen || len(b) < MsgLen || flags&unix.MSG_TRUNC != 0 {
		return nil, fmt.Errorf("%w: %d-byte message, want %d", ErrProtocol, n, MsgLen)
	}
	if flags&unix.MSG_CTRUNC != 0 {
		return nil, fmt.Errorf("%w: too many descriptors", ErrProtocol)
	}
	m := Msg(b[:MsgLen])
	if t := m.Type(); t == MsgNone || t > MsgDisconnect {
		return nil, fmt.Errorf("%w: message type %v", ErrProtocol, t)
	}
	return m, nil
}

// parseRights returns the descriptors in SCM_RIGHTS control messages.
func parseRights(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if r, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// expect receives a message and checks its type.
func (c *control) expect(deadline time.Time, t MsgType) (Msg, int, error) {
	m, fd, err := c.recv(deadline)
	if err != nil {
		return nil, -1, err
	}
	if m.Type() != t {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, -1, fmt.Errorf("%w: got %v, want %v", ErrProtocol, m.Type(), t)
	}
	return m, fd, nil
}
