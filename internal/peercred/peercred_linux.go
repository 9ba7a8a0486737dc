package peercred

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Of returns the credentials of the peer of a Unix socket (SO_PEERCRED).
func Of(c syscall.Conn) (Cred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return Cred{}, fmt.Errorf("peercred: %w", err)
	}
	var u *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		u, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Cred{}, fmt.Errorf("peercred: %w", err)
	}
	if serr != nil {
		return Cred{}, fmt.Errorf("peercred: SO_PEERCRED: %w", serr)
	}
	return Cred{PID: u.Pid, UID: u.Uid, GID: u.Gid}, nil
}

// Expect is the process expected at the other end of a Unix socket: the
// one holding the peer end of a TCP connection on this host.
type Expect struct {
	// Local and Remote are the TCP connection's addresses, seen from
	// this end.
	Local, Remote netip.AddrPort
}

// ExpectTCPPeer expects the process at the other end of the TCP
// connection c, which must stay on this host (and network namespace).
// The peer's socket is looked up by Check: it has an inode only once the
// peer accepted the connection.
func ExpectTCPPeer(c net.Conn) (*Expect, error) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("peercred: %v to %v is not a TCP connection", c.LocalAddr(), c.RemoteAddr())
	}
	return &Expect{Local: local.AddrPort(), Remote: remote.AddrPort()}, nil
}

// Check returns nil if the peer of the Unix socket u is the expected
// process: it runs as the owner of the TCP peer's socket, and holds that
// socket open (checked in /proc/PID/fd unless this process may not read
// it, which only happens for another user's process when this one is not
// privileged). Otherwise it returns an error matching ErrWrongPeer, or
// the error that kept it from checking.
func (e *Expect) Check(u syscall.Conn) error {
	cred, err := Of(u)
	if err != nil {
		return err
	}
	return e.CheckCred(cred)
}

// CheckCred is Check for credentials already known: those the kernel
// recorded for a Unix socket (SO_PEERCRED), such as a shared-memory
// channel's peer that a new connection proposes to reuse.
func (e *Expect) CheckCred(cred Cred) error {
	sock, err := TCPPeerSocket(e.Local, e.Remote)
	if err != nil {
		return err
	}
	if sock.Inode == 0 {
		return wrongPeer("the TCP peer's socket %v is not accepted yet", e.Remote)
	}
	if cred.UID != sock.UID {
		return wrongPeer("uid %d, the TCP peer's socket belongs to uid %d", cred.UID, sock.UID)
	}
	holds, err := HoldsSocket(cred.PID, sock.Inode)
	switch {
	case errors.Is(err, os.ErrPermission):
		return nil // the uid is what can be checked
	case err != nil:
		return err
	case !holds:
		return wrongPeer("process %d does not hold the TCP peer's socket", cred.PID)
	}
	return nil
}

// HoldsSocket reports whether process pid has the socket with this inode
// open, from /proc/PID/fd. An error matching os.ErrPermission means the
// process's descriptors may not be read. The newest descriptors (highest
// numbers) are looked at first: the socket of a connection just made is
// usually among them.
func HoldsSocket(pid int32, inode uint32) (bool, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(int(pid)) + "/fd")
	if err != nil {
		return false, fmt.Errorf("peercred: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return false, fmt.Errorf("peercred: %w", err)
	}
	fds := make([]int, 0, len(names))
	for _, n := range names {
		if fd, err := strconv.Atoi(n); err == nil {
			fds = append(fds, fd)
		}
	}
	slices.Sort(fds)
	want := "socket:[" + strconv.FormatUint(uint64(inode), 10) + "]"
	buf := make([]byte, 64)
	for i := len(fds) - 1; i >= 0; i-- {
		n, err := unix.Readlinkat(int(f.Fd()), strconv.Itoa(fds[i]), buf)
		if err == nil && string(buf[:n]) == want {
			return true, nil
		}
	}
	return false, nil
}

// Sizes of the sock_diag messages (linux/inet_diag.h).
const (
	nlmsgHdrLen      = 16
	inetDiagReqLen   = 56
	inetDiagMsgLen   = 72
	inetDiagSockID   = 48
	inetDiagNoCookie = 0xFFFFFFFF
)

// TCPPeerSocket finds, with sock_diag, the TCP socket on this host whose
// local address is remote and whose remote address is local: the other
// end of a connection from local to remote.
func TCPPeerSocket(local, remote netip.AddrPort) (Socket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return Socket{}, fmt.Errorf("peercred: sock_diag: %w", err)
	}
	defer unix.Close(fd)
	tv := unix.Timeval{Sec: 2}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	req := diagRequest(remote, local)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return Socket{}, fmt.Errorf("peercred: sock_diag: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return Socket{}, fmt.Errorf("peercred: sock_diag: %w", err)
	}
	return parseDiagReply(buf[:n], remote, local)
}

// diagRequest is an exact-match inet_diag request for the TCP socket
// bound to src and connected to dst.
func diagRequest(src, dst netip.AddrPort) []byte {
	b := make([]byte, nlmsgHdrLen+inetDiagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(b[8:], 1) // seq
	r := b[nlmsgHdrLen:]
	r[0] = unix.AF_INET6
	if src.Addr().Unmap().Is4() && dst.Addr().Unmap().Is4() {
		r[0] = unix.AF_INET // also finds dual-stack sockets with mapped addresses
	}
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], 0xFFFFFFFF) // all states
	putSockID(r[8:], r[0], src, dst)
	ne.PutUint32(r[8+36:], 0) // any interface
	ne.PutUint32(r[8+40:], inetDiagNoCookie)
	ne.PutUint32(r[8+44:], inetDiagNoCookie)
	return b
}

// putSockID writes the addresses of an inet_diag_sockid.
func putSockID(id []byte, family byte, src, dst netip.AddrPort) {
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	putAddr(id[4:20], family, src.Addr())
	putAddr(id[20:36], family, dst.Addr())
}

func putAddr(b []byte, family byte, a netip.Addr) {
	clear(b)
	if family == unix.AF_INET {
		v := a.Unmap().As4()
		copy(b, v[:])
		return
	}
	v := a.As16()
	copy(b, v[:])
}

// parseDiagReply reads the answer to diagRequest(src, dst): one
// inet_diag_msg for exactly that socket, or a netlink error.
func parseDiagReply(b []byte, src, dst netip.AddrPort) (Socket, error) {
	ne := binary.NativeEndian
	if len(b) < nlmsgHdrLen {
		return Socket{}, fmt.Errorf("peercred: sock_diag: %d-byte answer", len(b))
	}
	n := int(ne.Uint32(b[0:]))
	if n < nlmsgHdrLen || n > len(b) {
		return Socket{}, fmt.Errorf("peercred: sock_diag: message length %d of %d bytes", n, len(b))
	}
	body := b[nlmsgHdrLen:n]
	switch ne.Uint16(b[4:]) {
	case unix.NLMSG_ERROR:
		if len(body) < 4 {
			return Socket{}, fmt.Errorf("peercred: sock_diag: short error message")
		}
		if errno := -int32(ne.Uint32(body)); errno > 0 {
			if syscall.Errno(errno) == unix.ENOENT {
				return Socket{}, fmt.Errorf("peercred: no TCP socket on this host is %v connected to %v: %w", src, dst, unix.ENOENT)
			}
			return Socket{}, fmt.Errorf("peercred: sock_diag: %w", syscall.Errno(errno))
		}
		return Socket{}, fmt.Errorf("peercred: sock_diag: no answer")
	case unix.SOCK_DIAG_BY_FAMILY:
	default:
		return Socket{}, fmt.Errorf("peercred: sock_diag: message type %d", ne.Uint16(b[4:]))
	}
	if len(body) < inetDiagMsgLen {
		return Socket{}, fmt.Errorf("peercred: sock_diag: %d-byte inet_diag_msg", len(body))
	}
	// The lookup may fall back to a listening socket on the port: take
	// only the connected one.
	var want [inetDiagSockID]byte
	putSockID(want[:], body[0], src, dst)
	if string(body[4:4+36]) != string(want[:36]) {
		return Socket{}, fmt.Errorf("peercred: sock_diag answered for another socket than %v connected to %v", src, dst)
	}
	return Socket{UID: ne.Uint32(body[4+inetDiagSockID+12:]), Inode: ne.Uint32(body[4+inetDiagSockID+16:])}, nil
}
