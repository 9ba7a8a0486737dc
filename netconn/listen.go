package netconn

import (
	"context"
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
	// Link is the link: auto, udp, memif or a registered one (dpdk);
	// empty means $RSOCK_LINK, else auto (see ChoosePlan).
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
			l.deliver(newTCPConn(a.Conn, nil))
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
	why := fallbackf(FallbackBusy, SideListener, fmt.Sprintf("listener busy: %d rsock handshakes in progress", l.slots.size()))
	c.SetWriteDeadline(time.Now().Add(time.Second))
	if err := fallback.WriteReply(c, fallback.Decline(declineText(why.Kind))); err != nil {
		c.Close()
		return
	}
	c.SetWriteDeadline(time.Time{})
	l.deliver(newTCPConn(c, why))
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
// dialer whose Hello was read: the plan's step 2.
func (l *Listener) negotiate(c net.Conn, hello *fallback.Hello) (*Conn, error) {
	c.SetDeadline(time.Now().Add(l.handshake))
	// decline tells the dialer the kind only; the conn keeps the cause.
	decline := func(why *FallbackError) (*Conn, error) {
		if err := fallback.WriteReply(c, fallback.Decline(declineText(why.Kind))); err != nil {
			return nil, err
		}
		c.SetDeadline(time.Time{})
		return newTCPConn(c, why), nil
	}
	local := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr()
	remote := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
	in := planInput(l.set, SideListener, local, remote)
	in.Peer = hello
	plan, dev, fe := acquirePlanned(in)
	if fe != nil {
		return decline(fe)
	}
	if plan.Offer {
		return l.negotiateOffer(c, plan, hello, local, decline)
	}
	setupFailed := func(err error) (*Conn, error) {
		return decline(&FallbackError{Kind: FallbackSetup, Side: SideListener, Err: err})
	}
	stream, err := streamConfig(l.set.stream, plan, c)
	if err != nil {
		releaseDevice(dev)
		return setupFailed(err)
	}
	ep, err := rsock.NewEndpoint(dev.dev, stream)
	if err != nil {
		releaseDevice(dev)
		return setupFailed(err)
	}
	s, err := ep.Connect(paramsOf(hello), rsock.ConnectOptions{Net: "tcp", LocalAddr: c.LocalAddr(), RemoteAddr: c.RemoteAddr(), PathRTT: pathRTT(c)})
	if err != nil {
		ep.Close()
		releaseDevice(dev)
		return setupFailed(err)
	}
	abandon := func() {
		s.Abort(errPeerGone)
		s.Close()
		releaseDevice(dev)
	}
	if err := fallback.WriteReply(c, &fallback.Reply{Accept: true, Hello: helloFor(dev, ep.Params())}); err != nil {
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
		return newTCPConn(c, fromDecline(confirm.Reason, SideDialer)), nil
	}
	conn := newRDMAConn(c, s, dev)
	conn.fallback = plan.Note
	return conn, nil
}

// failAfterConfirm lets tests fail a listener's handshake after the
// dialer confirmed a same-host offer.
var failAfterConfirm = func() error { return nil }

// negotiateOffer runs the listener's side of the handshake over a
// same-host link the dialer offered (memif): it connects to the offer,
// answers with a queue pair on its own device over that link, and
// connects that pair to the one the dialer confirms with.
func (l *Listener) negotiateOffer(c net.Conn, plan Plan, hello *fallback.Hello, local netip.Addr, decline func(*FallbackError) (*Conn, error)) (*Conn, error) {
	e, _ := lookupLink(plan.Link)
	dev, ep, err := e.ops.(offerer).connect(c, hello, local, time.Now().Add(l.handshake), l.set.stream)
	if err != nil {
		return decline(&FallbackError{Kind: setupKind(err), Side: SideListener, Err: fmt.Errorf("%s: %w", plan.Link, err)})
	}
	fail := func(err error) (*Conn, error) {
		ep.Close()
		releaseDevice(dev)
		return nil, err
	}
	reply := helloFor(dev, ep.Params())
	if b, ok := e.ops.(replyBinder); ok {
		if err := b.bindReply(c, hello, reply, dev); err != nil {
			ep.Close()
			releaseDevice(dev)
			return decline(&FallbackError{Kind: FallbackSetup, Side: SideListener, Err: fmt.Errorf("%s: %w", plan.Link, err)})
		}
	}
	if err := fallback.WriteReply(c, &fallback.Reply{Accept: true, Hello: reply}); err != nil {
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
		return newTCPConn(c, fromDecline(confirm.Reason, SideDialer)), nil
	}
	if confirm.Hello.Link != plan.Link {
		return fail(fmt.Errorf("netconn: the dialer confirmed on link %q, want %s", confirm.Hello.Link, plan.Link))
	}
	if err := failAfterConfirm(); err != nil {
		return fail(err)
	}
	s, err := ep.Connect(paramsOf(confirm.Hello), rsock.ConnectOptions{Net: "tcp", LocalAddr: c.LocalAddr(), RemoteAddr: c.RemoteAddr(), PathRTT: pathRTT(c)})
	if err != nil {
		// The dialer thinks the stream is up: hang up. fail destroys
		// the queue pair, which fails the dialer's over shm (verbs/shm
		// ErrQPGone), and closes TCP, which fails it over memif.
		return fail(err)
	}
	return newRDMAConn(c, s, dev), nil
}
