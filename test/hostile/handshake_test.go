//go:build linux

package hostile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/internal/netlab"
	"github.com/rsock-go/rsock/netconn"
	"github.com/rsock-go/rsock/verbs"
)

// Hostile handshakes: clients and servers that speak rsock's handshake by
// hand (package fallback's frames) and lie in their Hello.

// handHello is a Hello as a hand-written peer sends it: a soft-RoCE udp
// endpoint at roce.
func handHello(roce netip.AddrPort) *fallback.Hello {
	return &fallback.Hello{Version: fallback.Version, Capabilities: fallback.CapStream, Provider: "softroce", Link: "udp",
		GID: verbs.GIDFromAddr(roce.Addr()), UDPPort: roce.Port(), QPN: 0x11, PSN: 1, MTU: 1024,
		RingAddr: 1 << 20, RingRKey: 0x1234, RingSize: 64 << 10, RecvDepth: 64}
}

// victim is a UDP socket that counts what reaches it.
type victim struct {
	conn *net.UDPConn
	got  atomic.Int64
	done chan struct{}
}

func newVictim(t *testing.T, ip netip.Addr) *victim {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
	if err != nil {
		t.Fatal(err)
	}
	v := &victim{conn: c, done: make(chan struct{})}
	go func() {
		defer close(v.done)
		buf := make([]byte, 9000)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
			v.got.Add(1)
		}
	}()
	t.Cleanup(v.close)
	return v
}

func (v *victim) addr() netip.AddrPort { return v.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

func (v *victim) close() {
	v.conn.Close()
	<-v.done
}

// check waits a while for packets, then fails the test if any came.
func (v *victim) check(t *testing.T) {
	t.Helper()
	time.Sleep(time.Second) // retransmits and keep-alives included
	if n := v.got.Load(); n > 0 {
		t.Errorf("the victim at %v received %d packets", v.addr(), n)
	}
}

// TestHelloAimsAtVictim: a client names a third party's address (GID and
// UDP port) in its Hello. The listener must not send it RDMA traffic: it
// declines (FallbackPeerAddress) and serves the client over TCP, and the
// victim's socket receives nothing, also while the server writes to the
// conn. IPv4 on loopback: the client is 127.0.0.1, the victim 127.0.0.2.
func TestHelloAimsAtVictim(t *testing.T) {
	helloAimsAtVictim(t, "", netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"), "")
}

// TestHelloAimsAtVictimIPv6: the same between two network namespaces over
// IPv6: the client in B names the server's own address in A.
func TestHelloAimsAtVictimIPv6(t *testing.T) {
	lab := newLab(t)
	helloAimsAtVictim(t, lab.A.Name, lab.A.IPv6, lab.A.IPv6, lab.B.Name)
}

// newLab makes two namespaces joined by a veth, or skips saying why.
func newLab(t *testing.T) *netlab.Lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot create network namespaces")
	}
	if err := netlab.Check(); err != nil {
		t.Skipf("no network namespaces here: %v", err)
	}
	lab, err := netlab.New(netlab.Config{Prefix: "hshake"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Error(err)
		}
	})
	return lab
}

// helloAimsAtVictim runs the listener in serverNS on serverIP, the victim
// at victimIP (in serverNS too) and the hand-written client in clientNS.
func helloAimsAtVictim(t *testing.T, serverNS string, serverIP, victimIP netip.Addr, clientNS string) {
	var (
		ln net.Listener
		v  *victim
	)
	inNetns(t, serverNS, func() {
		var err error
		lc := netconn.ListenConfig{Provider: netconn.ProviderSoftRoCE, Link: netconn.LinkUDP}
		if ln, err = lc.Listen(context.Background(), "tcp", netip.AddrPortFrom(serverIP, 0).String()); err != nil {
			t.Fatal(err)
		}
		v = newVictim(t, victimIP)
	})
	if t.Failed() {
		return
	}
	defer ln.Close()
	var c net.Conn
	inNetns(t, clientNS, func() {
		var err error
		if c, err = net.Dial("tcp", ln.Addr().String()); err != nil {
			t.Fatal(err)
		}
	})
	if t.Failed() {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := fallback.WritePrefaceAndHello(c, handHello(v.addr())); err != nil {
		t.Fatal(err)
	}
	reply, err := fallback.ReadReply(c)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Accept {
		// Play along: confirm, so that the server's stream runs.
		t.Errorf("the listener accepted a Hello that names %v", v.addr())
		if err := fallback.WriteReply(c, &fallback.Reply{Accept: true, Hello: handHello(v.addr())}); err != nil {
			t.Fatal(err)
		}
	} else if !strings.HasPrefix(reply.Reason, netconn.FallbackPeerAddress+":") {
		t.Errorf("Decline %q, want kind %s", reply.Reason, netconn.FallbackPeerAddress)
	}
	go io.Copy(io.Discard, c)
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetWriteDeadline(time.Now().Add(5 * time.Second))
	s.Write(make([]byte, 256<<10)) // over RDMA, this would go to the victim
	var fe *netconn.FallbackError
	if sc := s.(*netconn.Conn); sc.Transport() != "tcp" || !errors.As(sc.FallbackError(), &fe) || fe.Kind != netconn.FallbackPeerAddress || fe.Side != netconn.SideListener {
		t.Errorf("server conn on %s, reason %v", sc.Transport(), sc.FallbackError())
	}
	v.check(t)
}

// TestAcceptAimsAtVictim: a server names a third party's address in its
// Accept. The dialer must not send RDMA traffic there: it declines and
// stays on TCP, and the victim receives nothing while the client writes.
func TestAcceptAimsAtVictim(t *testing.T) {
	v := newVictim(t, netip.MustParseAddr("127.0.0.2"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan *fallback.Reply, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- nil
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		var pre [len(fallback.Preface)]byte
		var confirm *fallback.Reply
		if _, err := io.ReadFull(c, pre[:]); err == nil {
			if _, err := fallback.ReadHello(c); err == nil {
				if fallback.WriteReply(c, &fallback.Reply{Accept: true, Hello: handHello(v.addr())}) == nil {
					confirm, _ = fallback.ReadReply(c)
				}
			}
		}
		served <- confirm
		io.Copy(io.Discard, c)
	}()
	d := netconn.Dialer{Provider: netconn.ProviderSoftRoCE, Link: netconn.LinkUDP}
	c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	c.Write(make([]byte, 256<<10)) // over RDMA, this would go to the victim
	confirm := <-served
	if confirm == nil || confirm.Accept || !strings.HasPrefix(confirm.Reason, netconn.FallbackPeerAddress+":") {
		t.Errorf("the dialer's confirmation %+v, want a Decline of kind %s", confirm, netconn.FallbackPeerAddress)
	}
	var fe *netconn.FallbackError
	if cc := c.(*netconn.Conn); cc.Transport() != "tcp" || !errors.As(cc.FallbackError(), &fe) || fe.Kind != netconn.FallbackPeerAddress || fe.Side != netconn.SideDialer {
		t.Errorf("client conn on %s, reason %v", cc.Transport(), cc.FallbackError())
	}
	v.check(t)
}

// memifRecorder is a Unix socket under an rsock-like memif name that
// counts the connections made to it.
type memifRecorder struct {
	ln  *net.UnixListener
	got atomic.Int64
}

func newMemifRecorder(t *testing.T, name string) *memifRecorder {
	t.Helper()
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	r := &memifRecorder{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.got.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return r
}

// memifOffer is a Hello that offers memif at sock: the offer alone, as a
// dialer sends it, or beside a udp endpoint at roce (as older dialers
// did) when roce is valid.
func memifOffer(sock string, roce netip.AddrPort) *fallback.Hello {
	h := handHello(roce)
	if !roce.IsValid() {
		h = handHello(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 4791))
		h.Link = "memif"
	}
	h.Capabilities |= fallback.CapMemif
	h.MemifSocket, h.MemifSecret = sock, strings.Repeat("ab", 11)
	return h
}

// rsockMemifName is a socket name like those of rsock's memif offers.
func rsockMemifName() string {
	var b [16]byte
	rand.Read(b[:])
	return "@rsock-memif-" + hex.EncodeToString(b[:])
}

// TestRemoteMemifOffer: a client on another host (here another network
// namespace) offers memif, naming a socket on the server's host. The
// listener must not connect to it: only a peer on this host may offer
// memif. The sockets are abstract, named as rsock names its offers, in
// the server's namespace and in the one its goroutines run in, and one
// is a file.
func TestRemoteMemifOffer(t *testing.T) {
	lab := newLab(t)
	var ln net.Listener
	abstract := rsockMemifName()
	var recs []*memifRecorder
	inNetns(t, lab.A.Name, func() {
		var err error
		if ln, err = netconn.Listen("tcp", netip.AddrPortFrom(lab.A.IPv4, 0).String()); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, newMemifRecorder(t, abstract))
	})
	if t.Failed() {
		return
	}
	defer ln.Close()
	recs = append(recs, newMemifRecorder(t, abstract)) // the root namespace's
	file := filepath.Join(t.TempDir(), "memif.sock")
	recs = append(recs, newMemifRecorder(t, file))
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			s.Close()
		}
	}()
	for _, sock := range []string{abstract, file} {
		for _, beside := range []netip.AddrPort{{}, netip.AddrPortFrom(lab.B.IPv4, 4791)} {
			var c net.Conn
			var derr error
			inNetns(t, lab.B.Name, func() { c, derr = net.Dial("tcp", ln.Addr().String()) })
			if derr != nil {
				t.Fatal(derr)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if err := fallback.WritePrefaceAndHello(c, memifOffer(sock, beside)); err != nil {
				t.Fatal(err)
			}
			reply, err := fallback.ReadReply(c)
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			if reply.Accept && reply.Hello.Link == "memif" {
				t.Errorf("offer of %q from %v: accepted on memif", sock, lab.B.IPv4)
			}
			// Beside a udp endpoint, the listener may go on to udp (and here
			// fail to, for its devices' namespace): only the offer alone
			// must be declined for its host.
			if !beside.IsValid() && (reply.Accept || !strings.HasPrefix(reply.Reason, netconn.FallbackNotSameHost+":")) {
				t.Errorf("offer of %q from %v: Decline %q, want kind %s", sock, lab.B.IPv4, reply.Reason, netconn.FallbackNotSameHost)
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	for _, r := range recs {
		if n := r.got.Load(); n > 0 {
			t.Errorf("the listener connected %d times to %s, offered by a client on another host", n, r.ln.Addr())
		}
	}
}

// TestDeclineTellsNoLocalError: what the listener tells a client about a
// memif offer it could not take is the same whatever went wrong on the
// server (nothing listens, a server that is not memif, a file path that
// does not exist, a file that is not a socket): no file-existence oracle,
// no local error text. The offers come from this host, beside a udp
// endpoint.
func TestDeclineTellsNoLocalError(t *testing.T) {
	ln, err := netconn.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			s.Close()
		}
	}()
	junk := rsockMemifName()
	rec := newMemifRecorder(t, junk) // accepts and hangs up
	dir := t.TempDir()
	notSocket := filepath.Join(dir, "file")
	if err := os.WriteFile(notSocket, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	roce := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 4791)
	replies := map[string][]string{} // reply text by class of socket
	for _, tc := range []struct{ class, sock string }{
		{"rsock-like", rsockMemifName()}, // nobody listens
		{"rsock-like", junk},
		{"other", filepath.Join(dir, "none")},
		{"other", notSocket},
		{"other", "@vpp-memif"},
	} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if err := fallback.WritePrefaceAndHello(c, memifOffer(tc.sock, roce)); err != nil {
			t.Fatal(err)
		}
		reply, err := fallback.ReadReply(c)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		text := reply.Reason
		if reply.Accept {
			text = "accept on " + reply.Hello.Link + ": " + reply.Reason
		}
		t.Logf("offer of %q: %s", tc.sock, text)
		for _, leak := range []string{"refused", "no such", "not a socket", "HELLO", "protocol", "dial", "/", "@"} {
			if strings.Contains(reply.Reason, leak) {
				t.Errorf("offer of %q: the reply says %q", tc.sock, reply.Reason)
			}
		}
		replies[tc.class] = append(replies[tc.class], text)
	}
	for class, texts := range replies {
		for _, text := range texts[1:] {
			if text != texts[0] {
				t.Errorf("%s offers: replies differ: %q and %q", class, texts[0], text)
			}
		}
	}
	if rec.got.Load() == 0 {
		t.Error("the listener did not try the rsock-like offer: the test shows nothing")
	}
}
