//go:build linux

package netconn

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rsock-go/rsock/fallback"
)

// dialerChannel returns the dialer's side of the channel to ln's process,
// set up by a first connection that the test closes at its end.
func dialerChannel(t *testing.T, ln net.Listener) *shmChannel {
	t.Helper()
	c, s := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall})
	t.Cleanup(func() { c.Close(); s.Close() })
	if transport(c) != trShm {
		t.Fatalf("first connection on %q (%q)", transport(c), c.(*Conn).FallbackReason())
	}
	shmChannels.Lock()
	defer shmChannels.Unlock()
	ch := shmChannels.toListener[addrPort(ln.Addr())]
	if ch == nil {
		t.Fatal("no channel to the listener")
	}
	return ch
}

// helloReuse sends, on a TCP connection of its own to ln, a hand-written
// Hello that proposes to reuse the channel with this token, after bind
// (given the connection's ends) sent what it likes over the channel.
// It returns the reply, and what the listener's Accept returned.
func helloReuse(t *testing.T, ln net.Listener, ch *shmChannel, token [16]byte, bind func(dialer, listener netip.AddrPort)) (*fallback.Reply, *Conn) {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	dialer, listener := tcpEnds(c, false)
	bind(dialer, listener)
	h := offerHello(Plan{Provider: ProviderShm, Link: LinkShm, Offer: true}, planLocal)
	h.Capabilities |= fallback.CapShm
	h.ShmChannel, h.ShmToken = ch.dev.ChannelID(), token
	if err := fallback.WritePreface(c); err != nil {
		t.Fatal(err)
	}
	if err := fallback.WriteHello(c, h); err != nil {
		t.Fatal(err)
	}
	reply, err := fallback.ReadReply(c)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Accept {
		// End the handshake: the dialer declines.
		if err := fallback.WriteReply(c, fallback.Decline(declineText(FallbackDialer))); err != nil {
			t.Fatal(err)
		}
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return reply, s.(*Conn)
}

// TestShmReuseBinding: a Hello that proposes to reuse a live channel is
// taken only if the channel's peer process bound this very TCP
// connection to it with the Hello's token (shmbind.go). A third party's
// guessed token, a binding of another connection (a replayed Hello), a
// binding with the listener's label, and a binding already taken are
// refused with FallbackShmBinding, at once; the one correct binding is
// taken, and the listener's Accept is bound back to the connection.
func TestShmReuseBinding(t *testing.T) {
	var checkRefused func(t *testing.T, reply *fallback.Reply, s *Conn)
	ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
	ch := dialerChannel(t, ln)
	refused := func(t *testing.T) func(*fallback.Reply, *Conn) {
		return func(reply *fallback.Reply, s *Conn) { checkRefused(t, reply, s) }
	}
	_ = refused
	checkRefused = func(t *testing.T, reply *fallback.Reply, s *Conn) {
		t.Helper()
		if reply.Accept {
			t.Fatal("the listener took an unbound proposal to reuse its channel")
		}
		if !strings.HasPrefix(reply.Reason, FallbackShmBinding+":") {
			t.Fatalf("decline %q, want kind %s", reply.Reason, FallbackShmBinding)
		}
		var fe *FallbackError
		if transport(s) != "tcp" || !errors.As(s.FallbackError(), &fe) || fe.Kind != FallbackShmBinding || fe.Side != SideListener {
			t.Fatalf("listener's conn: %q, %v", transport(s), s.FallbackError())
		}
	}
	bindAs := func(role byte, token [16]byte, dialer, listener netip.AddrPort) {
		if err := ch.dev.Bind(shmBinding(role, token, dialer, listener)); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("guessed token", func(t *testing.T) {
		start := time.Now()
		refused(t)(helloReuse(t, ln, ch, newShmToken(), func(d, l netip.AddrPort) {}))
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("refused after %v", d)
		}
	})
	t.Run("another connection", func(t *testing.T) {
		// What a process that received a dialer's Hello and replays it
		// over a connection of its own has: the dialer's binding names
		// the dialer's connection.
		tok := newShmToken()
		refused(t)(helloReuse(t, ln, ch, tok, func(d, l netip.AddrPort) {
			bindAs(bindDialer, tok, netip.AddrPortFrom(d.Addr(), d.Port()^1), l)
		}))
	})
	t.Run("listener label", func(t *testing.T) {
		tok := newShmToken()
		refused(t)(helloReuse(t, ln, ch, tok, func(d, l netip.AddrPort) { bindAs(bindListener, tok, d, l) }))
	})
	var taken [16]byte
	t.Run("bound", func(t *testing.T) {
		tok := newShmToken()
		var dialer, listener netip.AddrPort
		reply, s := helloReuse(t, ln, ch, tok, func(d, l netip.AddrPort) {
			dialer, listener = d, l
			bindAs(bindDialer, tok, d, l)
		})
		if !reply.Accept {
			t.Fatalf("the listener declined a bound proposal: %q", reply.Reason)
		}
		h := reply.Hello
		if h.Capabilities&fallback.CapShm == 0 || h.ShmChannel != ch.dev.ChannelID() || h.ShmToken == ([16]byte{}) || h.ShmToken == tok {
			t.Fatalf("Accept not bound back: caps %#x, channel %#x, token %x", h.Capabilities, h.ShmChannel, h.ShmToken)
		}
		if !ch.dev.TakeBinding(shmBinding(bindListener, h.ShmToken, dialer, listener)) {
			t.Fatal("the listener's binding did not arrive on the channel")
		}
		if transport(s) != "tcp" || s.FallbackError() == nil {
			t.Fatalf("listener's conn after the dialer declined: %q, %v", transport(s), s.FallbackError())
		}
		taken = tok
	})
	t.Run("taken", func(t *testing.T) {
		if taken == ([16]byte{}) {
			t.Skip("bound failed")
		}
		// The same token again, bound for the new connection's ends,
		// but only once, and the listener took that one above: a
		// binding is good for one connection. (Sent again for the new
		// connection it would be a new binding: only the channel's
		// peer can send one.)
		refused(t)(helloReuse(t, ln, ch, taken, func(d, l netip.AddrPort) {}))
	})
}

// TestShmReplyBinding: a dialer that proposed to reuse a channel takes
// the listener's Accept only if it is bound to the connection on that
// channel. Here the connection reaches another process at the listener's
// address (as SO_REUSEPORT allows), which answers in the channel's
// process's name, with the dialer's own token or one of its own: the
// dialer declines with FallbackShmBinding and runs over TCP.
func TestShmReplyBinding(t *testing.T) {
	for name, forge := range map[string]func(offer *fallback.Hello) [16]byte{
		"own token":    func(offer *fallback.Hello) [16]byte { return offer.ShmToken },
		"random token": func(*fallback.Hello) [16]byte { return newShmToken() },
	} {
		t.Run(name, func(t *testing.T) {
			ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
			ch := dialerChannel(t, ln)
			// The impostor: a plain TCP listener that the dialer's
			// registry maps to the channel.
			imp, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer imp.Close()
			shmChannels.Lock()
			shmChannels.toListener[addrPort(imp.Addr())] = ch
			shmChannels.Unlock()
			defer func() {
				shmChannels.Lock()
				delete(shmChannels.toListener, addrPort(imp.Addr()))
				shmChannels.Unlock()
			}()
			done := make(chan error, 1)
			go func() {
				c, err := imp.Accept()
				if err != nil {
					done <- err
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				var pre [len(fallback.Preface)]byte
				if _, err := io.ReadFull(c, pre[:]); err != nil {
					done <- err
					return
				}
				offer, err := fallback.ReadHello(c)
				if err != nil {
					done <- err
					return
				}
				if offer.ShmChannel != ch.dev.ChannelID() {
					done <- errors.New("the dialer did not propose to reuse its channel")
					return
				}
				h := offerHello(Plan{Provider: ProviderShm, Link: LinkShm}, planLocal)
				h.Provider, h.Link = ProviderShm, LinkShm
				h.Capabilities |= fallback.CapShm
				h.ShmChannel, h.ShmToken = offer.ShmChannel, forge(offer)
				if err := fallback.WriteReply(c, &fallback.Reply{Accept: true, Hello: h}); err != nil {
					done <- err
					return
				}
				confirm, err := fallback.ReadReply(c)
				if err == nil && confirm.Accept {
					err = errors.New("the dialer confirmed a forged Accept")
				}
				done <- err
			}()
			c, err := (&Dialer{Link: LinkAuto, Stream: streamSmall}).DialContext(context.Background(), "tcp", imp.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			var fe *FallbackError
			if transport(c) != "tcp" || !errors.As(c.(*Conn).FallbackError(), &fe) || fe.Kind != FallbackShmBinding || fe.Side != SideDialer {
				t.Fatalf("dialer's conn: %q, %v", transport(c), c.(*Conn).FallbackError())
			}
		})
	}
}

// tcpSockets counts this process's descriptors that are TCP sockets.
func tcpSockets(t *testing.T) int {
	t.Helper()
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if fs := strings.Fields(line); len(fs) > 9 {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && inodes[l] {
			n++
		}
	}
	return n
}

// TestShmNoControlConn: once both sides confirmed, an shm connection
// holds no TCP descriptor and no goroutine of its own on either side,
// and keeps its addresses and deadlines.
func TestShmNoControlConn(t *testing.T) {
	ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
	c0, s0 := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall})
	defer c0.Close()
	defer s0.Close()
	socks, goroutines := tcpSockets(t), runtime.NumGoroutine()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	const n = 16
	for range n {
		c, s := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall})
		conns = append(conns, c, s)
		if transport(c) != trShm || transport(s) != trShm {
			t.Fatalf("transports %q, %q", transport(c), transport(s))
		}
		if c.LocalAddr().String() != s.RemoteAddr().String() || c.RemoteAddr().String() != s.LocalAddr().String() || c.RemoteAddr().String() != ln.Addr().String() {
			t.Fatalf("addresses %v→%v, %v←%v", c.LocalAddr(), c.RemoteAddr(), s.RemoteAddr(), s.LocalAddr())
		}
	}
	// Sockets closing on the other side may linger a moment.
	deadline := time.Now().Add(5 * time.Second)
	for tcpSockets(t) > socks && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := tcpSockets(t); got > socks {
		t.Errorf("%d TCP sockets after %d more shm connections, %d before", got, n, socks)
	}
	if g := runtime.NumGoroutine(); g > goroutines+2 {
		t.Errorf("%d goroutines after %d more shm connections, %d before", g, n, goroutines)
	}
	for i := 0; i < len(conns); i += 2 {
		echoCheck(t, conns[i], conns[i+1], 4<<10)
	}
	c := conns[0]
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestShmListenerFailsAfterConfirm: a listener whose handshake fails
// after the dialer confirmed destroys its queue pair; the dialer's
// connection, which has no control connection, fails with ECONNRESET at
// once (no hang).
func TestShmListenerFailsAfterConfirm(t *testing.T) {
	ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
	c0, s0 := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall}) // a first one on the channel
	defer c0.Close()
	defer s0.Close()
	defer func(f func() error) { failAfterConfirm = f }(failAfterConfirm)
	for _, reuse := range []bool{true, false} {
		if !reuse {
			closeIdleShmChannels()
			c0.Close()
			s0.Close()
			closeIdleShmChannels()
		}
		failed := make(chan struct{})
		failAfterConfirm = func() error {
			close(failed)
			return errors.New("injected failure after the confirm")
		}
		c, err := (&Dialer{Link: LinkAuto, Stream: streamSmall}).DialContext(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		<-failed
		failAfterConfirm = func() error { return nil }
		if transport(c) != trShm {
			c.Close()
			t.Fatalf("reuse %v: dialed on %q (%q)", reuse, transport(c), c.(*Conn).FallbackReason())
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		_, err = c.Read(make([]byte, 1))
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("reuse %v: read on a connection the listener gave up: %v, want ECONNRESET", reuse, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("reuse %v: the read failed %v after it started", reuse, d)
		}
		if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("reuse %v: write: %v, want ECONNRESET", reuse, err)
		}
		c.Close()
	}
}
