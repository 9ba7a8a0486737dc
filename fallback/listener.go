package fallback

import (
	"container/list"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Defaults for ListenerConfig.
const (
	DefaultSniffTimeout     = 200 * time.Millisecond
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultBacklog          = 128
	DefaultMaxSniffing      = 1024
)

// How long a declined connection is given to receive the Decline reply and
// close its side before it is closed.
const (
	declineWriteTimeout = time.Second
	declineLinger       = time.Second
	declineDrainMax     = 64 << 10
)

// ListenerConfig configures a sniffing Listener. Zero values mean defaults.
type ListenerConfig struct {
	// SniffTimeout is how long to wait for a preface before treating the
	// connection as plain TCP, for protocols where the server speaks first.
	// Default 200ms.
	SniffTimeout time.Duration
	// HandshakeTimeout bounds reading the Hello after a full preface.
	// Default 5s.
	HandshakeTimeout time.Duration
	// Backlog is how many sniffed connections may wait for
	// AcceptNegotiation. Default 128.
	Backlog int
	// MaxSniffing bounds the connections being sniffed at once. The
	// listener never stops accepting: a connection beyond the bound closes
	// the oldest sniff of the source (an IPv4 address, an IPv6 /64; see
	// SourceOf) with the most sniffs in flight, so that a source stalling
	// handshakes only displaces its own, whatever its share. Default 1024.
	MaxSniffing int
}

// Accepted is a connection accepted and sniffed by a Listener.
type Accepted struct {
	// Conn is the accepted TCP connection. For a plain client it is a
	// *ReplayConn that returns the sniffed bytes first. For an rsock dialer
	// it is the inner conn, with the preface and Hello consumed; the caller
	// answers with WriteReply.
	Conn net.Conn
	// Hello is the dialer's Hello, or nil for a plain TCP client.
	Hello *Hello
}

// Listener wraps a net.Listener and sniffs each accepted connection for the
// rsock preface. Sniffing runs in one goroutine per connection, so a slow
// client never delays another, and the listener never stops accepting:
// the sniffs in flight are bounded by closing the oldest of the source
// with the most. Connections that send a full preface and a
// bad Hello get a Decline reply and are closed without being surfaced.
type Listener struct {
	inner net.Listener
	cfg   ListenerConfig

	queue    chan Accepted
	closing  chan struct{}
	loopDone chan struct{}
	loopErr  error // written before loopDone is closed

	mu      sync.Mutex
	sniffs  list.List                   // of *sniffing, oldest first
	sources map[netip.Prefix]*list.List // of *sniffing by source, oldest first
	closed  bool
	seq     uint64 // sniffs admitted
	shed    uint64 // sniffs closed to make room

	wg        sync.WaitGroup
	closeOnce sync.Once
}

// NewListener starts sniffing connections accepted from inner. The caller
// must Close the Listener, which also closes inner.
func NewListener(inner net.Listener, cfg ListenerConfig) *Listener {
	if cfg.SniffTimeout <= 0 {
		cfg.SniffTimeout = DefaultSniffTimeout
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.Backlog <= 0 {
		cfg.Backlog = DefaultBacklog
	}
	if cfg.MaxSniffing <= 0 {
		cfg.MaxSniffing = DefaultMaxSniffing
	}
	l := &Listener{
		inner:    inner,
		cfg:      cfg,
		queue:    make(chan Accepted, cfg.Backlog),
		closing:  make(chan struct{}),
		loopDone: make(chan struct{}),
		sources:  make(map[netip.Prefix]*list.List),
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

// Addr returns the inner listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

func (l *Listener) errClosed() error {
	a := l.inner.Addr()
	return &net.OpError{Op: "accept", Net: a.Network(), Addr: a, Err: net.ErrClosed}
}

// AcceptNegotiation waits for the next sniffed connection. After Close it
// returns an error matching net.ErrClosed. If the inner listener fails for
// good, that error is returned.
func (l *Listener) AcceptNegotiation() (Accepted, error) {
	select {
	case <-l.closing:
		return Accepted{}, l.errClosed()
	default:
	}
	select {
	case a := <-l.queue:
		return a, nil
	case <-l.closing:
		return Accepted{}, l.errClosed()
	case <-l.loopDone:
		select {
		case a := <-l.queue:
			return a, nil
		case <-l.closing:
			return Accepted{}, l.errClosed()
		default:
			return Accepted{}, l.loopErr
		}
	}
}

// Close closes the inner listener and every connection being sniffed or
// waiting in the backlog, and waits for the listener's goroutines to end.
// Connections already returned by AcceptNegotiation are the caller's.
func (l *Listener) Close() error {
	err := error(l.errClosed())
	l.closeOnce.Do(func() {
		close(l.closing)
		err = l.inner.Close()
		l.mu.Lock()
		l.closed = true
		var conns []net.Conn
		for e := l.sniffs.Front(); e != nil; e = e.Next() {
			conns = append(conns, e.Value.(*sniffing).c)
		}
		l.mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
		l.wg.Wait()
		for {
			select {
			case a := <-l.queue:
				a.Conn.Close()
				continue
			default:
			}
			break
		}
	})
	return err
}

// Shed returns how many connections were closed mid-sniff to keep within
// MaxSniffing.
func (l *Listener) Shed() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shed
}

// sniffing is a connection being sniffed, in the listener's lists.
type sniffing struct {
	seq    uint64 // order of admission
	c      net.Conn
	all    *list.Element // in Listener.sniffs
	bySrc  *list.Element // in its source's list, if it has a source
	src    netip.Prefix
	active bool // still in the lists
}

// acceptLoop accepts without pause (but for errors like EMFILE): a
// connection is sniffed in a goroutine of its own, and the bounds on
// sniffs in flight close the oldest ones rather than stopping here.
func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	defer close(l.loopDone)
	var delay time.Duration
	for {
		c, err := l.inner.Accept()
		if err != nil {
			select {
			case <-l.closing:
				l.loopErr = l.errClosed()
				return
			default:
			}
			var te interface{ Temporary() bool }
			if !errors.As(err, &te) || !te.Temporary() {
				l.loopErr = err
				return
			}
			// Out of file descriptors and the like: back off, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-l.closing:
				t.Stop()
				l.loopErr = l.errClosed()
				return
			}
			continue
		}
		delay = 0
		s, shed := l.admit(c)
		for _, old := range shed {
			old.Close()
		}
		if s == nil {
			c.Close()
			l.loopErr = l.errClosed()
			return
		}
		l.wg.Add(1)
		go l.serve(s)
	}
}

// admit enters c in the lists of sniffs and returns the connection it
// displaces, if MaxSniffing was reached (to be closed by the caller,
// outside the lock): the oldest sniff of the source with the most. It
// returns nil if the listener closed.
func (l *Listener) admit(c net.Conn) (*sniffing, []net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, nil
	}
	var shed []net.Conn
	if l.sniffs.Len() >= l.cfg.MaxSniffing {
		if old := l.victimLocked(); old != nil {
			l.removeLocked(old)
			shed = append(shed, old.c)
			l.shed++
		}
	}
	l.seq++
	s := &sniffing{c: c, active: true, seq: l.seq}
	s.all = l.sniffs.PushBack(s)
	if src, ok := SourceOf(c.RemoteAddr()); ok {
		q := l.sources[src]
		if q == nil {
			q = new(list.List)
			l.sources[src] = q
		}
		s.src = src
		s.bySrc = q.PushBack(s)
	}
	return s, shed
}

// victimLocked picks the sniff to close for a new connection: the oldest
// of the source with the most sniffs in flight, or the oldest of all if
// no source has more than one (connections without an IP source count as
// one each).
func (l *Listener) victimLocked() *sniffing {
	var most *list.List
	for _, q := range l.sources {
		if most == nil || q.Len() > most.Len() ||
			q.Len() == most.Len() && q.Front().Value.(*sniffing).seq < most.Front().Value.(*sniffing).seq {
			most = q
		}
	}
	if most != nil && most.Len() > 1 {
		return most.Front().Value.(*sniffing)
	}
	if e := l.sniffs.Front(); e != nil {
		return e.Value.(*sniffing)
	}
	return nil
}

// removeLocked takes s out of the lists, if it is still there.
func (l *Listener) removeLocked(s *sniffing) {
	if !s.active {
		return
	}
	s.active = false
	l.sniffs.Remove(s.all)
	if s.bySrc != nil {
		src := l.sources[s.src]
		src.Remove(s.bySrc)
		if src.Len() == 0 {
			delete(l.sources, s.src)
		}
	}
}

func (l *Listener) serve(s *sniffing) {
	defer l.wg.Done()
	a, ok := l.sniff(s.c)
	l.mu.Lock()
	shed := !s.active // closed by admit, maybe after the sniff ended
	l.removeLocked(s)
	l.mu.Unlock()
	if !ok {
		return
	}
	if shed {
		a.Conn.Close()
		return
	}
	select {
	case l.queue <- a:
	case <-l.closing:
		a.Conn.Close()
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// sniff reads the start of c and decides what it is. ok is false when c was
// closed (declined, failed or the listener is closing).
func (l *Listener) sniff(c net.Conn) (Accepted, bool) {
	plain := func(b []byte) (Accepted, bool) {
		if err := c.SetReadDeadline(time.Time{}); err != nil {
			c.Close()
			return Accepted{}, false
		}
		return Accepted{Conn: NewReplayConn(c, append([]byte(nil), b...))}, true
	}
	var buf [len(Preface)]byte
	if err := c.SetReadDeadline(time.Now().Add(l.cfg.SniffTimeout)); err != nil {
		c.Close()
		return Accepted{}, false
	}
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		for i := n; i < n+m; i++ {
			// Byte prefaceVerIdx is the version: any value still means rsock.
			if i != prefaceVerIdx && buf[i] != Preface[i] {
				return plain(buf[:n+m])
			}
		}
		n += m
		if n == len(buf) {
			break
		}
		if err != nil {
			if n == 0 && isTimeout(err) {
				// Silent so far: a plain client that waits for the
				// server, or an rsock dialer whose preface was lost.
				if err := c.SetReadDeadline(time.Time{}); err != nil {
					c.Close()
					return Accepted{}, false
				}
				return Accepted{Conn: NewGuardedConn(c)}, true
			}
			if err == io.EOF || isTimeout(err) {
				return plain(buf[:n])
			}
			// Reset, or closed by Listener.Close.
			c.Close()
			return Accepted{}, false
		}
	}
	if buf[prefaceVerIdx] != Version {
		l.decline(c, errorf(ErrVersion, "preface version %d, this side speaks %d", buf[prefaceVerIdx], Version))
		return Accepted{}, false
	}
	if err := c.SetReadDeadline(time.Now().Add(l.cfg.HandshakeTimeout)); err != nil {
		c.Close()
		return Accepted{}, false
	}
	h, err := ReadHello(c)
	if err != nil {
		l.decline(c, err)
		return Accepted{}, false
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		c.Close()
		return Accepted{}, false
	}
	return Accepted{Conn: c, Hello: h}, true
}

// decline tells the dialer why its handshake failed, if it can, and closes c.
// It half-closes and drains briefly first, so that unread input does not make
// the kernel reset the connection and destroy the reply in flight.
func (l *Listener) decline(c net.Conn, cause error) {
	select {
	case <-l.closing:
		c.Close()
		return
	default:
	}
	reason := strings.TrimPrefix(cause.Error(), "fallback: ")
	if isTimeout(cause) {
		reason = "handshake timeout"
	}
	c.SetWriteDeadline(time.Now().Add(declineWriteTimeout))
	if _, err := c.Write(AppendReply(nil, Decline(reason))); err == nil {
		if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			c.SetReadDeadline(time.Now().Add(declineLinger))
			io.Copy(io.Discard, io.LimitReader(c, declineDrainMax))
		}
	}
	c.Close()
}
