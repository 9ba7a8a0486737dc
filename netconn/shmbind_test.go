//go:build linux

package netconn

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
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
// binding with another token, a binding with the listener's label, and
// a binding already taken are
// refused with FallbackShmBinding, at once; the one correct binding is
// taken, and the listener's Accept is bound back to the connection.
func TestShmReuseBinding(t *testing.T) {
	ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
	ch := dialerChannel(t, ln)
	// refused(t)(helloReuse(...)) checks that the proposal was declined
	// with FallbackShmBinding and the listener's conn runs on TCP.
	refused := func(t *testing.T) func(*fallback.Reply, *Conn) {
		return func(reply *fallback.Reply, s *Conn) {
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
	t.Run("another token", func(t *testing.T) {
		// A binding of this very connection, but with another token
		// than the Hello's: one the channel's peer meant for another
		// Hello.
		refused(t)(helloReuse(t, ln, ch, newShmToken(), func(d, l netip.AddrPort) { bindAs(bindDialer, newShmToken(), d, l) }))
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
