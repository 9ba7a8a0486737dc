// Package peercred checks who is at the other end of a Unix socket: the
// credentials the kernel recorded for it (SO_PEERCRED) against the process
// that holds the other end of a TCP connection on this host.
//
// A same-host handshake over TCP (rsock's memif offer, or file descriptors
// passed over a Unix socket) names a Unix socket for the peer to connect
// to. Anyone on the host who learns the name can connect first; Expect
// tells the real peer from them: the Unix socket's peer must run as the
// owner of the TCP peer's socket (found with sock_diag), and, where this
// process may read /proc/PID/fd of it, must be a process that holds that
// very socket. It is Linux's (SO_PEERCRED, NETLINK_SOCK_DIAG, /proc).
package peercred

import (
	"errors"
	"fmt"
)

// ErrWrongPeer reports a Unix socket peer that is not the expected process.
var ErrWrongPeer = errors.New("peercred: not the expected peer")

// Cred is the peer of a Unix socket as the kernel recorded it when the
// socket connected (for a client's socket, when the server listened).
type Cred struct {
	PID      int32
	UID, GID uint32
}

// Socket is a socket as sock_diag describes it.
type Socket struct {
	// Inode is the socket's inode number, as /proc/PID/fd shows it
	// ("socket:[Inode]").
	Inode uint32
	// UID is the socket's owner.
	UID uint32
}

func wrongPeer(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrWrongPeer, fmt.Sprintf(format, args...))
}
