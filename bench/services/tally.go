package services

import (
	"context"
	"errors"
	"maps"
	"net"
	"sync"
	"sync/atomic"
)

// ConnInfo is what rsock's connections (netconn.Conn) report about
// themselves; plain connections lack it.
type ConnInfo interface {
	Transport() string
	FallbackReason() string
}

// RanOn names what a connection runs on: its Transport() when it has
// one, else its local address's network ("tcp", "unix").
func RanOn(c net.Conn) (transport, reason string) {
	if ci, ok := c.(ConnInfo); ok {
		return ci.Transport(), ci.FallbackReason()
	}
	return c.LocalAddr().Network(), ""
}

// Tally counts connections by what they ran on, and their fallback
// reasons; a CountingListener's tally also counts those still open. It is
// safe for concurrent use.
type Tally struct {
	mu      sync.Mutex
	ranOn   map[string]int
	reasons map[string]int
	open    atomic.Int64
}

// Open is how many of the connections a CountingListener accepted are
// not closed yet.
func (t *Tally) Open() int { return int(t.open.Load()) }

// Add counts c.
func (t *Tally) Add(c net.Conn) {
	tr, reason := RanOn(c)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ranOn == nil {
		t.ranOn, t.reasons = map[string]int{}, map[string]int{}
	}
	t.ranOn[tr]++
	if reason != "" {
		t.reasons[reason]++
	}
}

// Counts returns copies of the counts: connections by transport, and by
// fallback reason.
func (t *Tally) Counts() (ranOn, reasons map[string]int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.ranOn), maps.Clone(t.reasons)
}

// CountingDial wraps dial so that every connection it opens is counted
// in t.
func CountingDial(dial DialFunc, t *Tally) DialFunc {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := dial(ctx, addr)
		if err == nil {
			t.Add(c)
		}
		return c, err
	}
}

// CountingListener counts every connection it accepts in Tally, and
// which of them are still open (its conns count their Close). After
// Close, Accept fails with an error wrapping net.ErrClosed, whatever the
// listener underneath returns, so that servers that test for it (redcon)
// stop serving.
type CountingListener struct {
	net.Listener
	Tally  *Tally
	closed atomic.Bool
}

// Accept accepts a connection and counts it.
func (l *CountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		if l.closed.Load() && !errors.Is(err, net.ErrClosed) {
			err = &net.OpError{Op: "accept", Net: l.Addr().Network(), Addr: l.Addr(), Err: errors.Join(net.ErrClosed, err)}
		}
		return nil, err
	}
	l.Tally.Add(c)
	l.Tally.open.Add(1)
	return &countedConn{Conn: c, tally: l.Tally}, nil
}

// countedConn is an accepted connection that counts its Close.
type countedConn struct {
	net.Conn
	tally *Tally
	once  sync.Once
}

// Close closes the connection.
func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.tally.open.Add(-1) })
	return err
}

// Close closes the listener.
func (l *CountingListener) Close() error {
	l.closed.Store(true)
	return l.Listener.Close()
}
