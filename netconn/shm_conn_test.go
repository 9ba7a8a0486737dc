//go:build linux

package netconn

import (
	"errors"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/verbs/shm"
)

// countShm counts the process's shm channels (each side's), the
// goroutines that watch them and the mappings of their arenas.
func countShm(t *testing.T) (channels, watchers, arenas int) {
	t.Helper()
	shmChannels.Lock()
	channels = len(shmChannels.byID) + len(shmChannels.toListener)
	shmChannels.Unlock()
	var left []string
	shmChannelsLeft(&left)
	for _, l := range left {
		if strings.HasPrefix(l, "goroutine") {
			watchers++
		}
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	arenas = strings.Count(string(maps), "rsock-shm-arena")
	return channels, watchers, arenas
}

// TestShmOneChannel: the connections between two processes (here the
// dialer's and the listener's side of one) share one channel: the
// first sets it up, the others reuse it, with no further channel,
// goroutine or arena mapping; all of them carry their own bytes, and
// the channel goes once the last one closed.
func TestShmOneChannel(t *testing.T) {
	ln := listen(t, ListenConfig{Stream: streamSmall})
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var first [3]int
	var goroutines int
	for i := range 8 {
		c, s := connPair(t, ln, &Dialer{Stream: streamSmall})
		conns = append(conns, c, s)
		if transport(c) != trShm || transport(s) != trShm {
			t.Fatalf("connection %d: transports %q (%q), %q (%q)", i, transport(c), c.(*Conn).FallbackReason(), transport(s), s.(*Conn).FallbackReason())
		}
		ch, w, a := countShm(t)
		if i == 0 {
			goroutines = runtime.NumGoroutine()
			first = [3]int{ch, w, a}
			if ch != 2 || w != 2 || a == 0 {
				t.Fatalf("after the first connection: %d channel ends, %d watchers, %d arena mappings", ch, w, a)
			}
		} else if [3]int{ch, w, a} != first {
			t.Fatalf("connection %d: %d channel ends, %d watchers, %d arena mappings; after the first: %v", i, ch, w, a, first)
		}
	}
	if g := runtime.NumGoroutine(); g > goroutines+2 {
		t.Errorf("%d goroutines after 8 connections, %d after the first: a goroutine per connection", g, goroutines)
	}
	for i := 0; i < len(conns); i += 2 {
		echoCheck(t, conns[i], conns[i+1], 64<<10)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	if left := linkResidue(t); len(left) > 0 {
		t.Fatalf("left once every connection closed: %q", left)
	}
}

// TestShmSetupFails: when the dialer cannot offer a channel, the
// connection runs over TCP and says why.
func TestShmSetupFails(t *testing.T) {
	defer func(f func(shm.Config) (*shm.Listener, error)) { listenShm = f }(listenShm)
	listenShm = func(shm.Config) (*shm.Listener, error) { return nil, errors.New("shm: injected failure") }
	ln := listen(t, ListenConfig{Stream: streamSmall})
	c, s := connPair(t, ln, &Dialer{Stream: streamSmall})
	defer c.Close()
	defer s.Close()
	if transport(c) != "tcp" || transport(s) != "tcp" {
		t.Fatalf("transports %q, %q, want tcp", transport(c), transport(s))
	}
	checkReason(t, "dialer", c, "injected failure")
	echoCheck(t, c, s, 64<<10)
}

// TestShmOfferHostile: a hand-written Hello that offers shm the way rsock
// never does (a file path, another program's abstract socket, a channel
// the listener does not have) is declined: the listener dials nothing,
// and the connection runs over TCP.
func TestShmOfferHostile(t *testing.T) {
	for name, mutate := range map[string]func(h *fallback.Hello){
		"path":       func(h *fallback.Hello) { h.ShmSocket = "/tmp/some.sock" },
		"other-name": func(h *fallback.Hello) { h.ShmSocket = "vpp-api" },
		"no-channel": func(h *fallback.Hello) { h.ShmSocket, h.ShmChannel = "", 0xdeadbeef },
	} {
		t.Run(name, func(t *testing.T) {
			ln := listen(t, ListenConfig{Stream: streamSmall})
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			h := offerHello(Plan{Provider: ProviderShm, Link: LinkShm, Offer: true}, planLocal)
			h.Capabilities |= fallback.CapShm
			h.ShmSocket = "rsock-shm-0123456789abcdef01234567"
			mutate(h)
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
				t.Fatalf("the listener accepted a hostile shm offer (%q)", h.ShmSocket)
			}
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if transport(s) != "tcp" || !strings.Contains(s.(*Conn).FallbackReason(), "shm") {
				t.Fatalf("listener: %q (%q)", transport(s), s.(*Conn).FallbackReason())
			}
		})
	}
}
