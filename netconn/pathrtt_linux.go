package netconn

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pathRTT is the least round trip the kernel measured on c, a TCP
// connection (TCP_INFO's tcpi_min_rtt), or 0 if c has no socket, is not
// TCP, or has no sample. The handshake's connection measures it before
// the stream sends, so a queue another flow holds from then on does not
// hide in it.
func pathRTT(c net.Conn) time.Duration {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var info *unix.TCPInfo
	if err := rc.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || info == nil || info.Min_rtt == 0 || info.Min_rtt == ^uint32(0) {
		return 0
	}
	return time.Duration(info.Min_rtt) * time.Microsecond
}
