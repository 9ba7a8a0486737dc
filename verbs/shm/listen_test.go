//go:build linux

package shm

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs"
)

// TestListenDial sets up a channel through an abstract Unix name, finds
// it in the registry by ID and by peer, runs a SEND over it, and forgets
// it once it ended.
func TestListenDial(t *testing.T) {
	ln, err := Listen("", Config{})
	must(t, err)
	defer ln.Close()
	type res struct {
		d   *Device
		err error
	}
	ch := make(chan res, 1)
	go func() {
		d, err := ln.Accept()
		ch <- res{d, err}
	}()
	dd, err := Dial(ln.Name(), Config{})
	must(t, err)
	r := <-ch
	must(t, r.err)
	da := r.d
	if da.ChannelID() != dd.ChannelID() || ByID(da.ChannelID()) == nil {
		t.Fatalf("channel IDs %x and %x, registered %v", da.ChannelID(), dd.ChannelID(), ByID(da.ChannelID()))
	}
	if got := ToPeer(int32(unix.Getpid())); got != da && got != dd {
		t.Fatalf("ToPeer found %v", got)
	}
	a, b := newNode(t, da, 1<<16, allAccess), newNode(t, dd, 1<<16, allAccess)
	connect(t, a, b, allAccess)
	b.vt().PostRecv(t, 1, 0, 64)
	a.vt().PostSend(t, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.vt().SGE(0, 8)}})
	waitOK(t, b.rcq)
	a.close(t)
	b.close(t)
	a.close, b.close = func(testing.TB) {}, func(testing.TB) {}
	must(t, da.Close())
	<-dd.Done()
	if !errors.Is(dd.Err(), ErrPeerGone) {
		t.Fatalf("the other end: %v", dd.Err())
	}
	must(t, dd.Close())
	if ByID(da.ChannelID()) != nil {
		t.Fatal("a closed channel is still registered")
	}
	// A refusing CheckPeer fails Accept.
	ln2, err := Listen("", Config{CheckPeer: func(*unix.Ucred) error { return errors.New("no") }})
	must(t, err)
	defer ln2.Close()
	go func() {
		d, err := ln2.Accept()
		ch <- res{d, err}
	}()
	if d, err := Dial(ln2.Name(), Config{}); err == nil {
		d.Close()
		t.Fatal("Dial succeeded against a listener that refuses")
	}
	if r := <-ch; r.err == nil {
		r.d.Close()
		t.Fatal("Accept succeeded despite CheckPeer")
	}
}

func waitOK(t *testing.T, cq verbs.CQ) {
	t.Helper()
	var wc [1]verbs.WC
	for {
		n, err := cq.Poll(wc[:])
		must(t, err)
		if n == 1 {
			if wc[0].Status != verbs.WCSuccess {
				t.Fatal(wc[0])
			}
			return
		}
		must(t, cq.Wait(t.Context()))
	}
}

// TestDialDeadline: a peer that accepts the socket and never sends its
// hello makes Dial fail at Config.Deadline, not hang.
func TestDialDeadline(t *testing.T) {
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@rsock-shm-test-silent", Net: "unixpacket"})
	must(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.AcceptUnix()
		if err == nil {
			defer c.Close()
			var b [64]byte
			for { // until Dial gives up and closes
				if _, err := c.Read(b[:]); err != nil {
					return
				}
			}
		}
	}()
	start := time.Now()
	d, err := Dial("rsock-shm-test-silent", Config{Deadline: time.Now().Add(100 * time.Millisecond)})
	if err == nil {
		d.Close()
		t.Fatal("Dial to a silent peer succeeded")
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("Dial = %v after %v, want a deadline error after 100ms", err, time.Since(start))
	}
}
