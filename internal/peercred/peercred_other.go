//go:build !linux

package peercred

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
)

var errUnsupported = errors.New("peercred: needs Linux (SO_PEERCRED, sock_diag)")

// Of is not supported here.
func Of(syscall.Conn) (Cred, error) { return Cred{}, errUnsupported }

// Expect is the process expected at the other end of a Unix socket.
type Expect struct{ Local, Remote netip.AddrPort }

// ExpectTCPPeer is not supported here.
func ExpectTCPPeer(net.Conn) (*Expect, error) { return nil, errUnsupported }

// Check is not supported here.
func (e *Expect) Check(syscall.Conn) error { return errUnsupported }

// CheckCred is not supported here.
func (e *Expect) CheckCred(Cred) error { return errUnsupported }

// HoldsSocket is not supported here.
func HoldsSocket(int32, uint32) (bool, error) { return false, errUnsupported }

// TCPPeerSocket is not supported here.
func TCPPeerSocket(netip.AddrPort, netip.AddrPort) (Socket, error) { return Socket{}, errUnsupported }
