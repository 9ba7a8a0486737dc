package fallback

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
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
}

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
	if n, ok, err := c.readPrefix(p); ok {
		return n, err
	}
	return c.Conn.Read(p)
}

// Buffered returns how many replayed bytes have not been read yet.
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
