package streambench

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// tcpCongestionControl returns a net.Dialer Control function that sets
// the socket's congestion control (TCP_CONGESTION) to name.
func tcpCongestionControl(name string) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
		}); cerr != nil {
			return cerr
		}
		if err != nil {
			return &net.OpError{Op: "setsockopt TCP_CONGESTION " + name, Net: "tcp", Err: err}
		}
		return nil
	}
}
