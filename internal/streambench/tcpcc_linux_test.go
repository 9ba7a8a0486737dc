package streambench

import (
	"net"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTCPCongestionControl: a dialer with the Control function runs the
// congestion control it names (reno is always built in), and a name the
// kernel does not have fails the dial.
func TestTCPCongestionControl(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	d := net.Dialer{Control: tcpCongestionControl("reno")}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got string
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		got, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if got = strings.TrimRight(got, "\x00"); got != "reno" {
		t.Fatalf("congestion control %q, want reno", got)
	}
	d.Control = tcpCongestionControl("no-such-cc")
	if c, err := d.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Fatal("dialed with a congestion control the kernel does not have")
	} else if !strings.Contains(err.Error(), "TCP_CONGESTION") {
		t.Fatalf("error %v does not name TCP_CONGESTION", err)
	}
}
