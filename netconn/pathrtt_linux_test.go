package netconn

import (
	"net"
	"testing"
	"time"
)

// TestPathRTT reads the kernel's least round trip of a real loopback TCP
// connection, on both ends, after a few bytes went each way; a conn
// without a socket (net.Pipe) or a UDP socket has none.
func TestPathRTT(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- nil
			return
		}
		buf := make([]byte, 4)
		if _, err := c.Read(buf); err == nil {
			c.Write(buf)
		}
		done <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	s := <-done
	if s == nil {
		t.Fatal("accept failed")
	}
	defer s.Close()
	for _, x := range []net.Conn{c, s} {
		if d := pathRTT(x); d <= 0 || d > time.Second {
			t.Errorf("%v: path RTT %v, want a loopback round trip", x.LocalAddr(), d)
		}
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if d := pathRTT(a); d != 0 {
		t.Errorf("net.Pipe: path RTT %v, want 0", d)
	}
	u, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if d := pathRTT(u.(net.Conn)); d != 0 {
		t.Errorf("UDP socket: path RTT %v, want 0", d)
	}
}
