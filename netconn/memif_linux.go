//go:build linux

package netconn

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/internal/peercred"
	"github.com/rsock-go/rsock/rsock"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/memif"
)

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

// memifSupported: memif runs on Linux.
func memifSupported() error { return nil }

// dialMemif connects to a dialer's memif offer; tests replace it to make
// it fail.
var dialMemif = memif.Dial

// memifOffer is a dialer's offer of a memif link: a server socket that
// accepts one client, the process at the other end of the TCP connection,
// presenting the secret.
type memifOffer struct {
	socket, secret string
	ln             *memif.Listener
	done           chan struct{} // closed when the accept loop ended
	link           *memif.Link   // the accepted link, until taken
	err            error         // why no link was accepted
}

// newMemifOffer listens on a fresh abstract socket with a fresh 128-bit
// secret (22 characters of base64, within memif's 23) for the process at
// the other end of the TCP connection tcp, found with sock_diag.
func newMemifOffer(tcp net.Conn, ip netip.Addr, deadline time.Time) (*memifOffer, error) {
	peer, err := peercred.ExpectTCPPeer(tcp)
	if err != nil {
		return nil, err
	}
	var name, secret [16]byte
	rand.Read(name[:])
	rand.Read(secret[:])
	o := &memifOffer{
		socket: memifSocketPrefix + hex.EncodeToString(name[:]),
		secret: base64.RawURLEncoding.EncodeToString(secret[:]),
		done:   make(chan struct{}),
	}
	cfg := memifConfig(ip, deadline)
	cfg.CheckPeer = func(c *net.UnixConn) error { return peer.Check(c) }
	ln, err := memif.Listen(o.socket, o.secret, cfg)
	if err != nil {
		return nil, err
	}
	o.ln = ln
	go o.accept()
	return o, nil
}

// accept takes the first client that is the TCP peer's process and
// completes the memif handshake. Other processes are refused before any
// message, a client with the wrong secret is refused, and neither ends
// the offer, which lasts until take's deadline or close.
func (o *memifOffer) accept() {
	defer close(o.done)
	o.link, o.err = o.ln.AcceptOne()
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
	// Named uniquely, as the shared devices are: each connection has its own.
	d, err := newDevice(key, fmt.Sprintf("softroce-memif%d-%v", devicesOpened.Add(1)-1, ip.Unmap()), l, verbs.MTU4096)
	if err != nil {
		return nil, err
	}
	d.private = true // its memif slot was taken by reserveMemif
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
	return newDevice(key, "softroce-memif-wire-"+key.ip.String(), l, verbs.MTU4096)
}

// acceptOffer takes the link the listener connected to an offer and makes
// an endpoint on a device over it (the dialer's side). It takes over the
// caller's memif slot (reserveMemif).
func acceptOffer(offer *memifOffer, deadline time.Time, local netip.Addr, stream rsock.Config) (*sharedDevice, *rsock.Endpoint, error) {
	l, err := offer.take(deadline)
	if err != nil {
		releaseMemif()
		return nil, nil, err
	}
	return memifEndpoint(l, local, stream)
}

// connectOffer connects to a dialer's memif offer and makes an endpoint
// on a device over it (the listener's side), if the offered socket's
// server is the process at the other end of the TCP connection tcp. It
// takes over the caller's memif slot (reserveMemif).
func connectOffer(tcp net.Conn, hello *fallback.Hello, deadline time.Time, local netip.Addr, stream rsock.Config) (*sharedDevice, *rsock.Endpoint, error) {
	peer, err := peercred.ExpectTCPPeer(tcp)
	if err != nil {
		releaseMemif()
		return nil, nil, err
	}
	cfg := memifConfig(local, deadline)
	cfg.CheckPeer = func(c *net.UnixConn) error { return peer.Check(c) }
	l, err := dialMemif(hello.MemifSocket, hello.MemifSecret, cfg)
	if err != nil {
		releaseMemif()
		return nil, nil, err
	}
	return memifEndpoint(l, local, stream)
}

// memifEndpoint makes an endpoint on a connection's private device over l,
// which takes the caller's memif slot; on failure the slot is given back.
func memifEndpoint(l *memif.Link, local netip.Addr, stream rsock.Config) (*sharedDevice, *rsock.Endpoint, error) {
	dev, err := openMemifDevice(l, local)
	if err != nil {
		releaseMemif()
		return nil, nil, err
	}
	if stream.RingSize == 0 {
		stream.RingSize = memifRingSize
	}
	ep, err := rsock.NewEndpoint(dev.dev, stream)
	if err != nil {
		releaseDevice(dev) // and its slot
		return nil, nil, err
	}
	return dev, ep, nil
}
