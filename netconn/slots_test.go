package netconn

import (
	"net"
	"testing"
	"time"
)

// addrConn is a net.Conn with a remote address, for the slot accounting.
type addrConn struct {
	net.Conn
	remote net.Addr
	closed chan struct{}
}

func (c *addrConn) RemoteAddr() net.Addr { return c.remote }
func (c *addrConn) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return nil
}

func connFrom(ip string) *addrConn {
	return &addrConn{remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1}, closed: make(chan struct{})}
}

// TestHandshakeSlotsShedding: with every slot held, a dialer from a source
// holding fewer slots sheds the oldest stalled handshake of the source
// holding most, and gets that very slot; a dialer from the source holding
// most does not shed (it waits, then gives up); young handshakes are not
// shed.
func TestHandshakeSlotsShedding(t *testing.T) {
	s := newHandshakeSlots(4, 2*time.Second)
	done := make(chan struct{})
	a1, a2, a3, b1 := connFrom("10.0.0.1"), connFrom("10.0.0.1"), connFrom("10.0.0.1"), connFrom("10.0.0.2")
	for _, c := range []*addrConn{a1, a2, a3, b1} {
		if !s.take(c, done) {
			t.Fatal("a free slot not taken")
		}
		time.Sleep(5 * time.Millisecond) // a1 is the oldest
	}
	// Young handshakes are not shed: the dialer waits and gives up.
	short := newHandshakeSlots(1, 100*time.Millisecond)
	y := connFrom("10.0.0.1")
	short.take(y, done)
	if short.take(connFrom("10.0.0.9"), done) {
		t.Fatal("a young handshake was shed")
	}

	// Each negotiation ends when its conn is closed, and gives its slot back.
	for _, c := range []*addrConn{a1, a2, a3, b1} {
		go func() {
			<-c.closed
			s.release(c)
		}()
	}
	start := time.Now()
	c := connFrom("10.0.0.3")
	if !s.take(c, done) {
		t.Fatal("a dialer from a new source got no slot")
	}
	if time.Since(start) < shedAge/2 {
		t.Errorf("a slot after %v, before any handshake was old enough to shed", time.Since(start))
	}
	select {
	case <-a1.closed:
	default:
		t.Error("the oldest handshake of the source holding most was not shed")
	}
	for _, o := range []*addrConn{a2, a3, b1} {
		select {
		case <-o.closed:
			t.Errorf("handshake from %v shed too", o.remote)
		default:
		}
	}
	// The source holding most (10.0.0.1, two slots now) does not shed
	// the others (one each).
	s.wait = 2 * shedAge
	if s.take(connFrom("10.0.0.1"), done) {
		t.Error("a dialer from the source holding most got a slot by shedding")
	}
	for _, o := range []*addrConn{a2, a3, b1} {
		select {
		case <-o.closed:
			t.Errorf("handshake from %v shed for the source holding most", o.remote)
		default:
		}
	}
	for _, o := range []*addrConn{a2, a3, b1, c} {
		o.Close()
	}
	s.release(c)
	short.release(y)
}
