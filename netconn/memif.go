package netconn

import (
	"encoding/base64"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/rsock"
	"github.com/rsock-go/rsock/verbs"
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
// killed mid-handshake; it takes one client, and closes as soon as that
// one connected or the handshake ended. Each side checks the other's
// process with SO_PEERCRED (internal/peercred): it must run as the owner
// of the TCP peer's socket and hold that socket (found with sock_diag);
// anyone else is closed before a message, and neither they nor clients
// with a wrong secret end the offer. Only root (who could read the rings
// anyway) or the peer process itself can get past that.
//
// The offer is the Hello's only endpoint (its Link is memif): the queue
// pairs are made on the memif link once it connects, so a dialer acquires
// no other device first. When memif cannot be set up, the connection runs
// over TCP; FallbackReason says why (a Decline tells the dialer only the
// kind). A listener connects only to an offer of a peer on this host
// (sameHost) whose socket is one that newMemifOffer makes (an abstract
// name, validMemifOffer), never to a path a client names. The memif link
// is Linux's (memfd, eventfd, abstract sockets); elsewhere memif is never
// set up (memif_other.go).

const (
	// memifLog2Ring is log2 of each memif ring's descriptors: a queue
	// pair's default window (512 packets) fits.
	memifLog2Ring = 9
	// memifBufferSize holds one frame of a 4096-byte RoCE MTU (Ethernet,
	// IPv6, UDP, BTH, RETH, ImmDt, payload and ICRC: 4196 bytes) in one
	// buffer.
	memifBufferSize = 4224
	// memifRingSize is the stream ring size of a memif connection when
	// none is configured, twice rsock's default: a credit report per
	// 256 KiB read instead of per 128 KiB, and more in flight, gave the
	// 64 KiB stream about a quarter more throughput and less CPU per byte
	// on both sides. It costs 2 MiB more address space per connection,
	// mapped as used, and a process has at most maxMemifConns of them.
	memifRingSize = 1 << 20
)

// maxMemifConns bounds the memif connections of a process: each has its
// own link (4.3 MiB of shared memory, four file descriptors) and receive
// goroutine, so further same-host connections use udp. A variable for
// tests.
var maxMemifConns int64 = 64

// memifConns counts the process's memif slots taken: open memif devices,
// and handshakes that may open one (see reserveMemif).
var memifConns atomic.Int64

// errMemifFull is why a connection does not use memif when the process
// has maxMemifConns of them.
var errMemifFull = errors.New("this process has the most memif connections it opens")

// reserveMemif takes one of the process's maxMemifConns memif slots, or
// reports false when all are taken. It is taken when a handshake offers
// or takes memif, not when the device opens a handshake later, so that
// concurrent handshakes cannot all pass the cap. The slot is given back
// with releaseMemif, or passes to the device that acceptOffer or
// connectOffer opens, which gives it back when it closes; those two give
// it back themselves when they fail.
func reserveMemif() bool {
	for {
		n := memifConns.Load()
		if n >= maxMemifConns {
			return false
		}
		if memifConns.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// releaseMemif gives back a slot from reserveMemif that opened no device.
func releaseMemif() { memifConns.Add(-1) }

// sameHost reports whether a TCP connection from local to remote stays on
// this host (and network namespace, where abstract sockets live).
func sameHost(local, remote netip.Addr) bool {
	local, remote = local.Unmap(), remote.Unmap()
	return remote.IsLoopback() || remote == local
}

// memifSocketPrefix starts the abstract socket name of every memif offer.
const memifSocketPrefix = "@rsock-memif-"

// validMemifOffer reports whether h's memif offer is one newMemifOffer
// makes: an abstract socket @rsock-memif-<32 hex digits> and a 128-bit
// secret in 22 characters of unpadded base64url. A listener connects to
// nothing else (not to a file path, not to another program's memif
// socket).
func validMemifOffer(h *fallback.Hello) bool {
	name, ok := strings.CutPrefix(h.MemifSocket, memifSocketPrefix)
	return ok && isHex(name, 32) && isSecret(h.MemifSecret)
}

// memifSecretLen is the length of a memif offer's secret: 16 random bytes
// in unpadded base64url, within the 23 characters memif's INIT carries.
const memifSecretLen = 22

// isSecret reports whether s has the form of a memif offer's secret.
func isSecret(s string) bool {
	if len(s) != memifSecretLen {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == 16
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// memifOps is the registry's memif link: a private link per connection,
// set up through an offer.
type memifOps struct{}

func (memifOps) validOffer(h *fallback.Hello) bool { return validMemifOffer(h) }

func (memifOps) available() error {
	if err := memifSupported(); err != nil {
		return err
	}
	if memifConns.Load() >= maxMemifConns {
		return errMemifFull
	}
	return nil
}

// offer makes the dialer's offer and puts it into h.
func (memifOps) offer(tcp net.Conn, h *fallback.Hello, local netip.Addr, deadline time.Time) (pendingOffer, error) {
	if !reserveMemif() {
		return nil, errMemifFull
	}
	o, err := newMemifOffer(tcp, local, deadline)
	if err != nil {
		releaseMemif()
		return nil, err
	}
	h.Capabilities |= fallback.CapMemif
	h.MemifSocket, h.MemifSecret = o.socket, o.secret
	return &memifPending{o: o, slot: true}, nil
}

// connect connects to the dialer's offer in h (the listener's side).
func (memifOps) connect(tcp net.Conn, h *fallback.Hello, local netip.Addr, deadline time.Time, stream rsock.Config) (*sharedDevice, *rsock.Endpoint, error) {
	if !reserveMemif() {
		return nil, nil, errMemifFull
	}
	return connectOffer(tcp, h, deadline, local, stream)
}

// memifPending is a dialer's memif offer and its slot.
type memifPending struct {
	o    *memifOffer
	slot bool // the reserveMemif slot, until accept passes it on
}

func (p *memifPending) accept(_ *fallback.Hello, deadline time.Time, local netip.Addr, stream rsock.Config) (*sharedDevice, *rsock.Endpoint, error) {
	p.slot = false
	return acceptOffer(p.o, deadline, local, stream)
}

func (p *memifPending) close() {
	p.o.close()
	if p.slot {
		p.slot = false
		releaseMemif()
	}
}

// offerHello is the dialer's Hello for an offer of a same-host link: the
// offer is its only endpoint. Its endpoint fields describe no queue pair
// (the queue pairs are made on the offered link once it connects), and
// carry only values that pass Hello.Validate.
func offerHello(p Plan, local netip.Addr) *fallback.Hello {
	var gid [16]byte
	a := local.Unmap().As16()
	copy(gid[:], a[:])
	return &fallback.Hello{
		Version:      fallback.Version,
		Capabilities: fallback.CapStream,
		Provider:     p.Provider,
		Link:         p.Link,
		GID:          gid,
		UDPPort:      verbs.RoCEv2Port,
		QPN:          2,
		MTU:          fallback.MaxMTU,
		RingSize:     fallback.MinRingSize,
		RecvDepth:    1,
	}
}
