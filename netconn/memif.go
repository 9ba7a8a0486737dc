package netconn

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/memif"
)

// Same-host connections over memif.
//
// A dialer whose peer is on its own host (the peer's IP is a loopback
// address or its own) offers a memif link in its Hello, beside its udp
// endpoint: it listens on a fresh abstract Unix socket with a fresh
// 128-bit secret and sends both. A listener that can use memif connects
// to that socket as memif client, presenting the secret, and answers
// with a Hello for a queue pair on a device of its own over that link;
// the dialer then makes its queue pair on a device over the accepted link
// and confirms with that pair's Hello. Each connection has its own memif
// link and device (a pair of rings is the connection's private wire).
//
// The socket is abstract, so that no file is left behind by a process
// killed mid-handshake; it takes one client that knows the secret, and
// closes as soon as that one connected or the handshake ended. Whoever
// can read the TCP handshake could connect first; on one host that is
// root, who could read the rings anyway.
//
// When memif cannot be set up, the connection runs over udp with auto,
// and over TCP with memif; FallbackReason says why.

const (
	// memifLog2Ring is log2 of each memif ring's descriptors: a queue
	// pair's default window (512 packets) fits.
	memifLog2Ring = 9
	// memifBufferSize holds one frame of a 4096-byte RoCE MTU (Ethernet,
	// IPv6, UDP, BTH, RETH, ImmDt, payload and ICRC: 4196 bytes) in one
	// buffer.
	memifBufferSize = 4224
	// memifAcceptTries bounds the failed memif handshakes (a wrong
	// secret) that an offer outlives.
	memifAcceptTries = 8
)

// maxMemifConns bounds the memif connections of a process: each has its
// own link (4.3 MiB of shared memory, four file descriptors) and receive
// goroutine, so further same-host connections use udp. A variable for
// tests.
var maxMemifConns int64 = 64

// memifConns counts the process's open memif devices.
var memifConns atomic.Int64

// errMemifFull is why a connection does not use memif when the process
// has maxMemifConns of them.
var errMemifFull = errors.New("this process has the most memif connections it opens; this one uses udp")

// memifRoom reports whether another memif connection may open.
func memifRoom() bool { return memifConns.Load() < maxMemifConns }

// sameHost reports whether a TCP connection from local to remote stays on
// this host (and network namespace, where abstract sockets live).
func sameHost(local, remote netip.Addr) bool {
	local, remote = local.Unmap(), remote.Unmap()
	return remote.IsLoopback() || remote == local
}

// memifConfig is the memif link configuration of a connection whose
// local IP is ip, with setup bounded by deadline.
func memifConfig(ip netip.Addr, deadline time.Time) memif.Config {
	return memif.Config{
		Name:             fmt.Sprintf("rsock-%d", os.Getpid()),
		Log2RingSize:     memifLog2Ring,
		BufferSize:       memifBufferSize,
		Local:            netip.AddrPortFrom(ip.Unmap(), link.RoCEv2Port),
		HandshakeTimeout: max(time.Until(deadline), time.Millisecond),
	}
}

// dialMemif connects to a dialer's memif offer; tests replace it to make
// it fail.
var dialMemif = memif.Dial

// memifOffer is a dialer's offer of a memif link: a server socket that
// accepts one client presenting the secret.
type memifOffer struct {
	socket, secret string
	ln             *memif.Listener
	done           chan struct{} // closed when the accept loop ended
	link           *memif.Link   // the accepted link, until taken
	err            error         // why no link was accepted
}

// newMemifOffer listens on a fresh abstract socket with a fresh secret.
func newMemifOffer(ip netip.Addr, deadline time.Time) (*memifOffer, error) {
	var name [16]byte
	var secret [11]byte
	rand.Read(name[:])
	rand.Read(secret[:])
	o := &memifOffer{
		socket: "@rsock-memif-" + hex.EncodeToString(name[:]),
		secret: hex.EncodeToString(secret[:]),
		done:   make(chan struct{}),
	}
	ln, err := memif.Listen(o.socket, o.secret, memifConfig(ip, deadline))
	if err != nil {
		return nil, err
	}
	o.ln = ln
	go o.accept()
	return o, nil
}

// accept takes the first client that completes the memif handshake; a
// client with the wrong secret is refused and the offer stays open.
func (o *memifOffer) accept() {
	defer close(o.done)
	defer o.ln.Close()
	for range memifAcceptTries {
		l, err := o.ln.Accept()
		if err == nil {
			o.link = l
			return
		}
		o.err = err
		if errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// take returns the accepted link, waiting for it until deadline.
func (o *memifOffer) take(deadline time.Time) (*memif.Link, error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-o.done:
	case <-t.C:
		o.ln.Close()
		<-o.done
	}
	l := o.link
	o.link = nil
	if l == nil {
		if o.err == nil || errors.Is(o.err, net.ErrClosed) {
			return nil, errors.New("memif: the peer did not connect in time")
		}
		return nil, o.err
	}
	return l, nil
}

// close withdraws the offer; a link accepted but not taken is closed.
func (o *memifOffer) close() {
	o.ln.Close()
	<-o.done
	if o.link != nil {
		o.link.Close()
		o.link = nil
	}
}

// openMemifDevice opens a connection's private soft-RoCE device over l,
// with one reference; l is closed with it, or on failure.
func openMemifDevice(l *memif.Link, ip netip.Addr) (*sharedDevice, error) {
	key := deviceKey{provider: ProviderSoftRoCE, link: LinkMemif, ip: ip.Unmap()}
	d, err := newDevice(key, "softroce-memif-"+ip.Unmap().String(), l, verbs.MTU4096)
	if err != nil {
		return nil, err
	}
	d.private = true
	memifConns.Add(1)
	return d, nil
}

// openWireDevice opens a shared device on an external memif wire: a memif
// client link to the server socket wire, with the secret of
// $RSOCK_MEMIF_SECRET.
func openWireDevice(key deviceKey, wire string) (*sharedDevice, error) {
	l, err := dialMemif(wire, os.Getenv(EnvMemifSecret), memifConfig(key.ip, time.Now().Add(DefaultHandshakeTimeout)))
	if err != nil {
		return nil, fmt.Errorf("netconn: memif wire %s: %w", wire, err)
	}
	d, err := openMemifDevice(l, key.ip)
	if err != nil {
		return nil, err
	}
	d.key, d.private = key, false
	memifConns.Add(-1)
	return d, nil
}
