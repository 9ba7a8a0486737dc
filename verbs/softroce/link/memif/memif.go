//go:build linux

// Package memif is a soft-RoCE link over shared memory, speaking the memif
// protocol of DPDK's net_memif and VPP, in pure Go.
//
// Two processes on one host connect over a SOCK_SEQPACKET Unix socket. The
// server (Listen) sends HELLO; the client (Dial) creates a shared memory
// region (a memfd, sealed against shrinking) holding two rings and their
// buffers, and sends INIT (with the shared secret), ADD_REGION (the memfd,
// as SCM_RIGHTS), one ADD_RING per ring (with its interrupt eventfd) and
// CONNECT, each acknowledged; the server answers CONNECTED. Either side
// may send DISCONNECT with a reason. The client-to-server (C2S) ring
// carries the client's frames, the server-to-client (S2C) ring the
// server's.
//
// Frames are whole Ethernet/IPv4 (or IPv6)/UDP/RoCEv2 frames, as on a
// wire, so DPDK's net_memif (e.g. dpdk-testpmd forwarding between two
// memif ports) can sit between two links. Since the link sees every byte
// it checks the full ICRC and reports link.ICRCGood or link.ICRCBad.
//
// The peer shares the rings and buffers and may write anything into them
// at any time. Every index and descriptor is read once, checked against
// the ring and the regions, and only then used; a violation fails the
// link with ErrRing. Regions received from a peer must be sealed against
// shrinking, so the peer cannot make accesses fault.
//
// A receiver polls briefly after traffic (adaptively: longer while
// polling pays, less when it does not), then unmasks the ring's interrupt
// and sleeps on its eventfd in Go's netpoller, so an idle link costs no
// CPU.
package memif

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Defaults for Config fields left zero.
const (
	DefaultLog2RingSize     = 10
	DefaultBufferSize       = 2048
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultTxWait           = 100 * time.Millisecond
	// MaxFrameLen is the longest frame received; longer ones are dropped.
	MaxFrameLen = 9216
)

// Config configures a link.
type Config struct {
	// ID is the memif interface id the client asks for and the server
	// answers to (0 by default).
	ID uint32
	// Name is sent to the peer as application and interface name.
	Name string
	// Log2RingSize is log2 of the number of descriptors per ring
	// (DefaultLog2RingSize if 0; at most MaxLog2RingSize). A client uses
	// the smaller of it and the server's limit.
	Log2RingSize uint8
	// BufferSize is the size of each packet buffer a client creates
	// (DefaultBufferSize if 0). Frames longer than a buffer are chained.
	// With DPDK as server it must be at least the server's bsize.
	BufferSize int
	// Local is this end's IP address and UDP port: the source of frames
	// sent and the link's LocalAddr (127.0.0.1:4791 if unset).
	Local netip.AddrPort
	// LocalMAC and PeerMAC are the Ethernet source and destination of
	// frames sent.
	LocalMAC, PeerMAC wire.MAC
	// HandshakeTimeout bounds connection setup (DefaultHandshakeTimeout
	// if 0).
	HandshakeTimeout time.Duration
	// TxWait is how long Send waits for ring space before dropping a
	// packet (DefaultTxWait if 0).
	TxWait time.Duration
	// CheckPeer, if set, vets the process at the other end of the control
	// socket before any message is exchanged (with package
	// internal/peercred, say): Dial fails with its error, and Accept and
	// AcceptOne close the connection. The server's credentials are those
	// it had when it listened, the client's those it had when it connected.
	CheckPeer func(*net.UnixConn) error
}

func (c *Config) withDefaults() (Config, error) {
	r := *c
	if r.Log2RingSize == 0 {
		r.Log2RingSize = DefaultLog2RingSize
	}
	if r.Log2RingSize > MaxLog2RingSize {
		return r, fmt.Errorf("memif: Log2RingSize %d above %d", r.Log2RingSize, MaxLog2RingSize)
	}
	if r.BufferSize == 0 {
		r.BufferSize = DefaultBufferSize
	}
	// At least 256, so that the longest frame fits a chain of maxChain.
	if r.BufferSize < 256 || r.BufferSize > 1<<16 {
		return r, fmt.Errorf("memif: BufferSize %d not in [256, 65536]", r.BufferSize)
	}
	if !r.Local.IsValid() {
		r.Local = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), link.RoCEv2Port)
	}
	if r.HandshakeTimeout <= 0 {
		r.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if r.TxWait <= 0 {
		r.TxWait = DefaultTxWait
	}
	if r.Name == "" {
		r.Name = "rsock"
	}
	return r, nil
}

// checkSecret checks that s fits the INIT message's secret field.
func checkSecret(s string) error {
	if len(s) >= SecretLen {
		return fmt.Errorf("memif: secret of %d bytes, at most %d", len(s), SecretLen-1)
	}
	for i := range len(s) {
		if s[i] == 0 {
			return fmt.Errorf("memif: secret contains a NUL byte")
		}
	}
	return nil
}
