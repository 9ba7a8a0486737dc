package fallback

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ReplayConn is a net.Conn that returns prefix bytes (those a sniffer already
// read) before reading from the wrapped Conn. Everything else goes straight to
// the wrapped Conn. It keeps CloseWrite and CloseRead when the wrapped conn has
// them (as *net.TCPConn does), honours read deadlines and Close for the
// replayed bytes too, and is safe for concurrent use.
type ReplayConn struct {
	net.Conn

	pending atomic.Bool // prefix not yet fully read; fast path when false
	mu      sync.Mutex
	prefix  []byte
	rdl     time.Time // read deadline, for reads served from prefix
	closed  bool

	// guard is set while the first bytes are still to be checked for a
	// late rsock preface; gmu serialises that check (it reads from the
	// wrapped conn, so it does not hold mu).
	guard atomic.Bool
	gmu   sync.Mutex
}

// ErrLatePreface is wrapped by the error a guarded conn (see
// NewGuardedConn) returns when its first bytes are an rsock preface that
// came after the sniff gave up. It wraps ECONNRESET: the conn is reset, so
// that the dialer starts over.
var ErrLatePreface = fmt.Errorf("fallback: an rsock preface came after the sniff timeout; the connection was reset so that the dialer starts over: %w", syscall.ECONNRESET)

// NewReplayConn returns a conn that reads prefix and then c. It takes
// ownership of prefix.
func NewReplayConn(c net.Conn, prefix []byte) *ReplayConn {
	rc := &ReplayConn{Conn: c}
	if len(prefix) > 0 {
		rc.prefix = prefix
		rc.pending.Store(true)
	}
	return rc
}

// NewGuardedConn returns a conn for a client that sent nothing before the
// sniff timeout. Its first bytes are checked before they are returned: if
// they are an rsock preface (an rsock dialer whose preface was lost and
// sent again, on a lossy path), reads fail with ErrLatePreface and the
// connection is reset, so that the application never reads the handshake
// as data. Anything else is returned as it came.
func NewGuardedConn(c net.Conn) *ReplayConn {
	rc := &ReplayConn{Conn: c}
	rc.guard.Store(true)
	return rc
}

// checkGuard reads the first bytes of a guarded conn until they either
// differ from the preface (they become the replayed prefix) or are all of
// it (the conn is reset).
func (c *ReplayConn) checkGuard() error {
	if !c.guard.Load() {
		return nil
	}
	c.gmu.Lock()
	defer c.gmu.Unlock()
	if !c.guard.Load() {
		return nil
	}
	var buf [len(Preface)]byte
	n := 0
	for {
		m, err := c.Conn.Read(buf[n:])
		for i := n; i < n+m; i++ {
			if i != prefaceVerIdx && buf[i] != Preface[i] {
				c.keep(buf[:n+m])
				return nil
			}
		}
		n += m
		if n == len(buf) {
			c.guard.Store(false)
			if l, ok := c.Conn.(interface{ SetLinger(int) error }); ok {
				l.SetLinger(0) // reset, so the dialer does not wait
			}
			c.Conn.Close()
			return c.opErr("read", ErrLatePreface)
		}
		if err != nil {
			if n > 0 && !errors.Is(err, net.ErrClosed) {
				// Return what came first; the next read of the wrapped
				// conn reports the error again.
				c.keep(buf[:n])
				return nil
			}
			return err
		}
	}
}

// keep ends the guard with b, the bytes it read, to be replayed.
func (c *ReplayConn) keep(b []byte) {
	c.mu.Lock()
	c.prefix = append(c.prefix, b...)
	c.pending.Store(true)
	c.mu.Unlock()
	c.guard.Store(false)
}

func (c *ReplayConn) opErr(op string, err error) error {
	oe := &net.OpError{Op: op, Source: c.Conn.LocalAddr(), Addr: c.Conn.RemoteAddr(), Err: err}
	if oe.Source != nil {
		oe.Net = oe.Source.Network()
	}
	return oe
}

// readPrefix serves a read from the prefix. ok is false when the prefix is
// exhausted and the caller should read from the wrapped conn.
func (c *ReplayConn) readPrefix(p []byte) (n int, ok bool, err error) {
	if !c.pending.Load() {
		return 0, false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.prefix) == 0 {
		return 0, false, nil
	}
	if c.closed {
		return 0, true, c.opErr("read", net.ErrClosed)
	}
	if !c.rdl.IsZero() && !time.Now().Before(c.rdl) {
		return 0, true, c.opErr("read", os.ErrDeadlineExceeded)
	}
	n = copy(p, c.prefix)
	c.prefix = c.prefix[n:]
	if len(c.prefix) == 0 {
		c.prefix = nil
		c.pending.Store(false)
	}
	return n, true, nil
}

// Read reads replayed bytes first, then from the wrapped conn. A read served
// from the replayed bytes never blocks and never mixes in wrapped-conn bytes.
func (c *ReplayConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := c.checkGuard(); err != nil {
		return 0, err
	}
	if n, ok, err := c.readPrefix(p); ok {
		return n, err
	}
	return c.Conn.Read(p)
}

// Buffered returns how many replayed bytes have not been read yet. A
// guarded conn whose first bytes were not read yet has none.
func (c *ReplayConn) Buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.prefix)
}

// SetDeadline sets the read and write deadlines, as net.Conn does.
func (c *ReplayConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

// SetReadDeadline sets the read deadline, as net.Conn does.
func (c *ReplayConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

// Close closes the wrapped conn and discards unread replayed bytes.
func (c *ReplayConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return c.Conn.Close()
}

// CloseWrite shuts down the writing side of the wrapped conn, so the peer
// reads EOF. It fails if the wrapped conn has no CloseWrite method.
func (c *ReplayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.opErr("close", fmt.Errorf("fallback: %T has no CloseWrite", c.Conn))
}

// CloseRead shuts down the reading side of the wrapped conn. It fails if the
// wrapped conn has no CloseRead method.
func (c *ReplayConn) CloseRead() error {
	if cr, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return cr.CloseRead()
	}
	return c.opErr("close", fmt.Errorf("fallback: %T has no CloseRead", c.Conn))
}

// Unwrap returns the wrapped conn. Reading from it directly skips any
// replayed bytes not yet read.
func (c *ReplayConn) Unwrap() net.Conn { return c.Conn }

type writerOnly struct{ io.Writer }
type readerOnly struct{ io.Reader }

// ReadFrom lets io.Copy use the wrapped conn's ReadFrom (sendfile, splice).
func (c *ReplayConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{c.Conn}, r)
}

// WriteTo writes the replayed bytes to w, then copies the wrapped conn to w
// (with the wrapped conn's WriteTo when it has one) until EOF or an error.
func (c *ReplayConn) WriteTo(w io.Writer) (int64, error) {
	if err := c.checkGuard(); err != nil {
		return 0, err
	}
	var total int64
	var buf [512]byte
	for {
		n, ok, err := c.readPrefix(buf[:])
		if !ok {
			break
		}
		if err != nil {
			return total, err
		}
		m, err := w.Write(buf[:n])
		total += int64(m)
		if err != nil {
			return total, err
		}
	}
	var n int64
	var err error
	if wt, ok := c.Conn.(io.WriterTo); ok {
		n, err = wt.WriteTo(w)
	} else {
		n, err = io.Copy(w, readerOnly{c.Conn})
	}
	return total + n, err
}
