package netconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/rsock"
)

// ListenConfig configures a listener. The zero value listens with the
// environment's provider and link.
type ListenConfig struct {
	// ListenConfig makes the TCP listener.
	net.ListenConfig
	// Provider is auto, softroce, rdmacore or tcp; empty means
	// $RSOCK_PROVIDER, else auto. With tcp, rsock dialers are declined and
	// every connection is plain TCP.
	Provider string
	// Link is the soft-RoCE link; empty means $RSOCK_LINK, else udp.
	Link string
	// Stream sizes the streams of accepted connections.
	Stream rsock.Config
	// SniffTimeout bounds the wait for an rsock preface before a silent
	// client is served as plain TCP; default 200 ms.
	SniffTimeout time.Duration
	// HandshakeTimeout bounds the rest of the handshake; default
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// MaxPendingHandshakes bounds the rsock handshakes in progress (each
	// holds a queue pair and its rings until the dialer confirms and the
	// connection is queued for Accept); default
	// DefaultMaxPendingHandshakes. A further dialer waits for one to end,
	// up to half of HandshakeTimeout, then is declined and served over
	// TCP. While it waits, if another source (an IPv4 address, an IPv6
	// /64) holds more of the slots than its own, the oldest handshake of
	// the source holding most that has waited half a second for its
	// dialer to confirm is ended, so that a source stalling handshakes
	// cannot keep the slots from others.
	MaxPendingHandshakes int
}

// DefaultMaxPendingHandshakes is the default ListenConfig.MaxPendingHandshakes.
const DefaultMaxPendingHandshakes = 64

// Listen announces on the local network address ("tcp", "tcp4", "tcp6").
func Listen(network, address string) (net.Listener, error) {
	var lc ListenConfig
	return lc.Listen(context.Background(), network, address)
}

// Listen announces on the local address. Accept returns *Conn values.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	set, err := resolve(lc.Provider, lc.Link, lc.Stream)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	inner, err := lc.ListenConfig.Listen(ctx, network, address)
	if err != nil {
		return nil, err
	}
	hs := lc.HandshakeTimeout
	if hs <= 0 {
		hs = DefaultHandshakeTimeout
	}
	pending := lc.MaxPendingHandshakes
	if pending <= 0 {
		pending = DefaultMaxPendingHandshakes
	}
	l := &Listener{
		slots:     newHandshakeSlots(pending, hs/2),
		fl:        fallback.NewListener(inner, fallback.ListenerConfig{SniffTimeout: lc.SniffTimeout, HandshakeTimeout: hs}),
		set:       set,
		handshake: hs,
		ready:     make(chan *Conn, 128),
		done:      make(chan struct{}),
		pending:   make(map[net.Conn]struct{}),
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Listener is an rsock listener: it serves rsock dialers over RDMA and
// every other TCP client as plain TCP.
type Listener struct {
	fl        *fallback.Listener
	slots     *handshakeSlots
	set       settings
	handshake time.Duration

	ready     chan *Conn
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	mu        sync.Mutex
	loopErr   error                 // why the accept loop ended
	pending   map[net.Conn]struct{} // conns in the middle of a handshake
	closed    bool
}

// Addr is the TCP address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.fl.Addr() }

// Accept waits for and returns the next connection, a *Conn.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c, ok := <-l.ready:
		if ok {
			return c, nil
		}
	case <-l.done:
		// Prefer connections already negotiated over reporting the close.
		select {
		case c, ok := <-l.ready:
			if ok {
				return c, nil
			}
		default:
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return nil, l.loopErr
}

// Close stops listening; connections already returned by Accept stay open.
// It is idempotent.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.fl.Close()
		l.mu.Lock()
		l.closed = true
		for c := range l.pending {
			c.Close() // ends its handshake at once
		}
		l.mu.Unlock()
		l.wg.Wait()
		close(l.ready)
		for c := range l.ready {
			c.Close()
		}
	})
	return nil
}

// acceptLoop takes sniffed connections from the fallback listener and
// negotiates each rsock one in its own goroutine.
func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		a, err := l.fl.AcceptNegotiation()
		if err != nil {
			l.mu.Lock()
			l.loopErr = err
			l.mu.Unlock()
			close(l.done)
			return
		}
		if a.Hello == nil {
			l.deliver(newTCPConn(a.Conn, ""))
			continue
		}
		if !l.track(a.Conn) {
			a.Conn.Close()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			if !l.slots.take(a.Conn, l.done) {
				l.untrack(a.Conn)
				l.declineBusy(a.Conn)
				return
			}
			defer l.slots.release(a.Conn) // after delivery: an accepted conn still holds its rings
			c, err := l.negotiate(a.Conn, a.Hello)
			l.slots.settle(a.Conn)
			l.untrack(a.Conn)
			if err != nil {
				logHandshakeFailure("accept", a.Conn.RemoteAddr(), err)
				a.Conn.Close()
				return
			}
			l.deliver(c)
		}()
	}
}

// declineBusy answers a dialer that found every handshake slot taken: it
// is declined and served over TCP. The Decline is a few bytes on a new
// connection and does not wait for the client.
func (l *Listener) declineBusy(c net.Conn) {
	reason := fmt.Sprintf("listener busy: %d rsock handshakes in progress", l.slots.size())
	c.SetWriteDeadline(time.Now().Add(time.Second))
	if err := fallback.WriteReply(c, fallback.Decline(reason)); err != nil {
		c.Close()
		return
	}
	c.SetWriteDeadline(time.Time{})
	l.deliver(newTCPConn(c, reason))
}

// track records a conn under negotiation; false if the listener closed.
func (l *Listener) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.pending[c] = struct{}{}
	pendingHandshakes.Add(1)
	return true
}

func (l *Listener) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.pending, c)
	l.mu.Unlock()
	pendingHandshakes.Add(-1)
}

// deliver queues a conn for Accept, or closes it if the listener closed.
func (l *Listener) deliver(c *Conn) {
	noteEstablished(c, "accept")
	select {
	case l.ready <- c:
	case <-l.done:
		c.Close()
	}
}

// negotiate runs the listener's side of the handshake with an rsock
// dialer whose Hello was read.
func (l *Listener) negotiate(c net.Conn, hello *fallback.Hello) (*Conn, error) {
	c.SetDeadline(time.Now().Add(l.handshake))
	decline := func(reason string) (*Conn, error) {
		if err := fallback.WriteReply(c, fallback.Decline(reason)); err != nil {
			return nil, err
		}
		c.SetDeadline(time.Time{})
		return newTCPConn(c, reason), nil
	}
	if !l.set.rdma() {
		return decline("RDMA is turned off on this listener")
	}
	local := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr()
	memifWhy := ""
	switch {
	case hello.Capabilities&fallback.CapMemif != 0 && l.set.memif():
		conn, err := l.negotiateMemif(c, hello, local)
		if err == nil || !errors.Is(err, errMemifSetup) {
			return conn, err
		}
		if l.set.link == LinkMemif {
			return decline(err.Error())
		}
		memifWhy = err.Error() // on to udp
	case l.set.link == LinkMemif && l.set.wire == "":
		return decline("this listener runs memif only, and the dialer did not offer it")
	}
	dev, why, err := acquireFor(l.set, local)
	if err != nil {
		return decline(err.Error())
	}
	if !compatible(dev, hello) {
		releaseDevice(dev)
		return decline(fmt.Sprintf("link %q is not supported", hello.Link))
	}
	stream, err := streamConfig(l.set.stream, c)
	if err != nil {
		releaseDevice(dev)
		return decline(err.Error())
	}
	ep, err := rsock.NewEndpoint(dev.dev, stream)
	if err != nil {
		releaseDevice(dev)
		return decline(err.Error())
	}
	s, err := ep.Connect(paramsOf(hello), rsock.ConnectOptions{Net: "tcp", LocalAddr: c.LocalAddr(), RemoteAddr: c.RemoteAddr()})
	if err != nil {
		ep.Close()
		releaseDevice(dev)
		return decline(err.Error())
	}
	abandon := func() {
		s.Abort(errPeerGone)
		s.Close()
		releaseDevice(dev)
	}
	// An Accept's reason tells the dialer why its memif offer was not taken.
	reply := &fallback.Reply{Accept: true, Hello: helloFor(dev, ep.Params())}
	if memifWhy != "" {
		reply.Reason = fallback.Decline(memifWhy).Reason
	}
	if err := fallback.WriteReply(c, reply); err != nil {
		abandon()
		return nil, err
	}
	// The dialer confirms once its queue pair is ready, or declines.
	confirm, err := fallback.ReadReply(c)
	if err != nil {
		abandon()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	if !confirm.Accept {
		abandon()
		return newTCPConn(c, "the dialer could not connect: "+confirm.Reason), nil
	}
	conn := newRDMAConn(c, s, dev)
	if memifWhy != "" {
		conn.reason = "memif: " + memifWhy
	} else {
		conn.reason = why
	}
	return conn, nil
}

// errMemifSetup marks a memif failure before the listener answered, after
// which the handshake can still go on over udp.
var errMemifSetup = errors.New("memif setup failed")

// negotiateMemif runs the listener's side of the handshake over a memif
// link to the dialer's offer: it connects, answers with a queue pair on
// its own device over that link, and connects that pair to the one the
// dialer confirms with.
func (l *Listener) negotiateMemif(c net.Conn, hello *fallback.Hello, local netip.Addr) (*Conn, error) {
	if !reserveMemif() {
		return nil, fmt.Errorf("%w: %w", errMemifSetup, errMemifFull)
	}
	dev, ep, err := connectOffer(c, hello, time.Now().Add(l.handshake), local, l.set.stream)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errMemifSetup, err)
	}
	fail := func(err error) (*Conn, error) {
		ep.Close()
		releaseDevice(dev)
		return nil, err
	}
	if err := fallback.WriteReply(c, &fallback.Reply{Accept: true, Hello: helloFor(dev, ep.Params())}); err != nil {
		return fail(err)
	}
	confirm, err := fallback.ReadReply(c)
	if err != nil {
		return fail(err)
	}
	c.SetDeadline(time.Time{})
	if !confirm.Accept {
		ep.Close()
		releaseDevice(dev)
		return newTCPConn(c, "the dialer could not connect: "+confirm.Reason), nil
	}
	if confirm.Hello.Link != LinkMemif {
		return fail(fmt.Errorf("netconn: the dialer confirmed on link %q, want memif", confirm.Hello.Link))
	}
	s, err := ep.Connect(paramsOf(confirm.Hello), rsock.ConnectOptions{Net: "tcp", LocalAddr: c.LocalAddr(), RemoteAddr: c.RemoteAddr()})
	if err != nil {
		// The dialer thinks the stream is up: hang up.
		return fail(err)
	}
	return newRDMAConn(c, s, dev), nil
}
