package netconn

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rsock-go/rsock/rsock"
)

// Conn is a connection from Dial or a Listener's Accept: an RDMA stream
// with a TCP control connection (none over shm once the handshake is
// done), or a plain TCP connection.
type Conn struct {
	tcp       net.Conn // the TCP connection (control channel, or the data path); nil over shm after the handshake
	laddr     net.Addr // the TCP connection's addresses
	raddr     net.Addr
	stream    *rsock.Stream // nil on the TCP path
	dev       *sharedDevice // nil on the TCP path
	transport string
	fallback  *FallbackError // why a conn that tried RDMA is on TCP (or, on RDMA, why a faster link was passed over)

	closeOnce sync.Once
	closeErr  error
	closing   atomic.Bool
	liveDone  chan struct{}
	grace     atomic.Pointer[time.Timer]
	obs       connObs // statistics and logging (stats.go)
}

var _ net.Conn = (*Conn)(nil)

// peerGoneGrace is how long, after the control connection ends, a stream
// waits for the peer's in-band CLOSE before it fails: an orderly close
// sends CLOSE just before the TCP FIN, a killed process sends only the FIN.
const peerGoneGrace = time.Second

// errPeerGone is the cause when the control connection ends without the
// peer closing the stream.
var errPeerGone = fmt.Errorf("netconn: the peer's control connection closed: %w", syscall.ECONNRESET)

// newTCPConn makes a conn on the TCP path; why is nil for a conn that
// never tried RDMA.
func newTCPConn(c net.Conn, why *FallbackError) *Conn {
	return register(&Conn{tcp: c, laddr: c.LocalAddr(), raddr: c.RemoteAddr(), transport: "tcp", fallback: why})
}

// newRDMAConn makes a conn on the RDMA path once both sides confirmed.
// Over shm the control connection closes here: the peer's process dying
// closes the channel, which fails every stream on it at once, and a live
// peer that gives a connection up (a listener whose handshake failed
// after the dialer confirmed, or any Close) destroys its queue pair,
// which fails ours once what it sent before is read (verbs/shm
// ErrQPGone). So an shm connection holds no TCP socket and no goroutine
// of its own. Over the other providers a goroutine reads the control
// connection, whose end is how a peer's death shows (watchControl).
func newRDMAConn(c net.Conn, s *rsock.Stream, d *sharedDevice) *Conn {
	cn := &Conn{tcp: c, laddr: c.LocalAddr(), raddr: c.RemoteAddr(), stream: s, dev: d, transport: d.transport(), liveDone: make(chan struct{})}
	if d.dev.Provider() == ProviderShm {
		c.Close() // nothing was left unread: the handshake's last frame went the other way or was read
		cn.tcp = nil
		close(cn.liveDone)
		return register(cn)
	}
	go cn.watchControl()
	return register(cn)
}

// watchControl reads the control connection, which carries nothing after
// the handshake, until it ends; then the stream fails unless the peer
// closed it in order.
func (c *Conn) watchControl() {
	defer close(c.liveDone)
	var b [64]byte
	for {
		if _, err := c.tcp.Read(b[:]); err != nil {
			break
		}
	}
	if c.closing.Load() {
		return
	}
	c.grace.Store(time.AfterFunc(peerGoneGrace, func() { c.stream.AbortUnlessPeerClosed(errPeerGone) }))
}

// FallbackReason says why a connection is on TCP: empty on RDMA, and for
// a dialer or client that never tried (provider tcp, a plain client).
// It is the text of FallbackError.
func (c *Conn) FallbackReason() string {
	if c.fallback == nil {
		return ""
	}
	return c.fallback.Error()
}

// FallbackError returns why the connection is on TCP (or, on RDMA, why a
// faster link was passed over) as a *FallbackError, or nil: use errors.As
// to read its Kind and Side.
func (c *Conn) FallbackError() error {
	if c.fallback == nil {
		return nil
	}
	return c.fallback
}

// Transport reports the path: "rdma/<provider>/<link>" or "tcp".
func (c *Conn) Transport() string { return c.transport }

// Read reads from the connection.
func (c *Conn) Read(b []byte) (int, error) {
	if c.stream != nil {
		n, err := c.stream.Read(b)
		if err != nil {
			c.noteError("read", err)
		}
		return n, err
	}
	n, err := c.tcp.Read(b)
	c.obs.read.Add(uint64(n))
	if err != nil {
		c.noteError("read", err)
	}
	return n, err
}

// Write writes to the connection.
func (c *Conn) Write(b []byte) (int, error) {
	if c.stream != nil {
		n, err := c.stream.Write(b)
		if err != nil {
			c.noteError("write", err)
		}
		return n, err
	}
	n, err := c.tcp.Write(b)
	c.obs.written.Add(uint64(n))
	if err != nil {
		c.noteError("write", err)
	}
	return n, err
}

// CloseWrite shuts down the writing side: the peer reads the data sent so
// far, then io.EOF.
func (c *Conn) CloseWrite() error {
	if c.stream != nil {
		return c.stream.CloseWrite()
	}
	if cw, ok := c.tcp.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return &net.OpError{Op: "close", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: errors.ErrUnsupported}
}

// Close closes the connection; on the RDMA path it first lets the data
// written be delivered (bounded by the stream's CloseTimeout). It is
// idempotent.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		defer unregister(c)
		if c.stream != nil {
			c.closing.Store(true)
			c.closeErr = c.stream.Close()
			if c.tcp != nil {
				c.tcp.Close()
			}
			<-c.liveDone
			if t := c.grace.Load(); t != nil {
				t.Stop()
			}
			releaseDevice(c.dev)
			return
		}
		c.closeErr = c.tcp.Close()
	})
	return c.closeErr
}

// LocalAddr is the local TCP address (of the control connection, also
// once it closed).
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr is the peer's TCP address.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if c.stream != nil {
		return c.stream.SetDeadline(t)
	}
	return c.tcp.SetDeadline(t)
}

// SetReadDeadline sets the read deadline; Read returns an error wrapping
// os.ErrDeadlineExceeded after it.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.stream != nil {
		return c.stream.SetReadDeadline(t)
	}
	return c.tcp.SetReadDeadline(t)
}

// SetWriteDeadline sets the write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if c.stream != nil {
		return c.stream.SetWriteDeadline(t)
	}
	return c.tcp.SetWriteDeadline(t)
}
