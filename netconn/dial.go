package netconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/rsock"
)

// DefaultHandshakeTimeout bounds the dialer's wait for the listener's reply.
const DefaultHandshakeTimeout = 5 * time.Second

// plainServers remembers addresses that answered like plain TCP servers.
var plainServers = fallback.NewPlainCache(5*time.Minute, 4096)

// Dialer dials rsock connections. The zero value dials with the
// environment's provider and link.
type Dialer struct {
	// Dialer makes the TCP connection (timeouts, local address, keep-alive).
	net.Dialer
	// Provider is auto, softroce, rdmacore or tcp; empty means
	// $RSOCK_PROVIDER, else auto.
	Provider string
	// Link is the link: auto, udp, memif or a registered one (dpdk);
	// empty means $RSOCK_LINK, else auto (see ChoosePlan).
	Link string
	// Stream sizes the stream (ring size, receive depth, keep-alive).
	Stream rsock.Config
	// HandshakeTimeout bounds the wait for the listener's answer; default
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
}

// Dial connects to address on the named network ("tcp", "tcp4", "tcp6").
func Dial(network, address string) (net.Conn, error) {
	var d Dialer
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to address. The returned conn is a *Conn, on RDMA
// when both sides can, on TCP otherwise.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := d.dial(ctx, network, address)
	if err == nil {
		noteEstablished(c.(*Conn), "dial")
	}
	return c, err
}

func (d *Dialer) dial(ctx context.Context, network, address string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, &net.OpError{Op: "dial", Net: network, Err: net.UnknownNetworkError(network)}
	}
	set, err := resolve(d.Provider, d.Link, d.Stream)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	if !set.rdma() {
		return d.dialPlain(ctx, network, address)
	}
	if plainServers.IsPlain(address) {
		c, err := d.dialPlain(ctx, network, address)
		if err == nil {
			c.(*Conn).fallback = fallbackf(FallbackPlainServer, SideDialer, "the address answered like a plain TCP server recently, and is remembered as one for a few minutes")
		}
		return c, err
	}
	c, err := d.Dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	conn, plain, err := d.negotiate(ctx, c, set)
	if plain == maybePlain && errors.Is(err, syscall.ECONNRESET) {
		// An rsock listener resets a connection whose preface came after
		// its sniff gave up (a lost segment on a lossy path): try once more.
		c.Close()
		if c, err = d.Dialer.DialContext(ctx, network, address); err != nil {
			return nil, err
		}
		conn, plain, err = d.negotiate(ctx, c, set)
	}
	if plain != notPlain {
		// The server did not answer like an rsock listener, and it has
		// seen our preface: start again without it. Remember the address
		// only when the answer proves a plain server; a hang-up or a
		// timeout may be a passing failure of an rsock listener.
		c.Close()
		if plain == provenPlain {
			plainServers.MarkPlain(address)
		}
		pc, perr := d.dialPlain(ctx, network, address)
		if perr == nil {
			pc.(*Conn).fallback = &FallbackError{Kind: FallbackPlainServer, Side: SideDialer, Err: fmt.Errorf("the server did not complete the rsock handshake: %w", err)}
		}
		return pc, perr
	}
	if err != nil {
		logHandshakeFailure("dial", c.RemoteAddr(), err)
		c.Close()
		return nil, &net.OpError{Op: "dial", Net: network, Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	return conn, nil
}

func (d *Dialer) dialPlain(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := d.Dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return newTCPConn(c, nil), nil
}

// plainness says whether a server looked like a plain TCP server.
type plainness int

const (
	notPlain    plainness = iota
	provenPlain           // it answered with bytes that are not an rsock reply
	maybePlain            // it hung up or stayed silent
)

// negotiate runs the dialer's side of the handshake on c, as the plan's
// steps 1 and 3 (see ChoosePlan). It reports whether the server looked
// plain; otherwise it returns a conn, on the TCP path when the plan, the
// listener or the setup says so.
func (d *Dialer) negotiate(ctx context.Context, c net.Conn, set settings) (_ *Conn, plain plainness, _ error) {
	h := &dialHandshake{c: c, set: set}
	local := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr()
	remote := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
	h.in = planInput(set, SideDialer, local, remote)
	// Step 1, before anything is sent: without a plan the conn is plain
	// TCP, and no preface goes out.
	var fe *FallbackError
	if h.plan, h.dev, fe = acquirePlanned(h.in); fe != nil {
		return newTCPConn(c, fe), notPlain, nil
	}
	defer h.release()
	timeout := d.HandshakeTimeout
	if timeout <= 0 {
		timeout = DefaultHandshakeTimeout
	}
	h.deadline = time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(h.deadline) {
		h.deadline = dl
	}
	c.SetDeadline(h.deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	// The preface goes first, so that the listener's sniff does not wait
	// for the endpoint's setup.
	if err := fallback.WritePreface(c); err != nil {
		return nil, notPlain, err
	}
	hello, err := h.endpoint()
	if err != nil {
		// The listener waits for a Hello that will not come: start over
		// on plain TCP.
		return nil, maybePlain, err
	}
	reply, plain, err := exchange(ctx, c, hello)
	if err != nil {
		return nil, plain, err
	}
	if !reply.Accept {
		h.release()
		c.SetDeadline(time.Time{})
		return newTCPConn(c, fromDecline(reply.Reason, SideListener)), notPlain, nil
	}
	conn, err := h.confirm(reply.Hello)
	return conn, notPlain, err
}

// dialHandshake is a dialer's handshake in progress: its plan and what it
// holds until the conn owns it.
type dialHandshake struct {
	c        net.Conn
	set      settings
	in       PlanInput
	plan     Plan
	deadline time.Time
	dev      *sharedDevice   // the plan's device (a shared one), or the offer's once taken
	ep       *rsock.Endpoint // the queue pair on dev
	pending  pendingOffer    // a same-host offer, until the handshake ends
}

// release gives back what the handshake holds.
func (h *dialHandshake) release() {
	if h.ep != nil {
		h.ep.Close() // a no-op once a stream owns it
		h.ep = nil
	}
	if h.dev != nil {
		releaseDevice(h.dev)
		h.dev = nil
	}
	if h.pending != nil {
		h.pending.close()
		h.pending = nil
	}
}

// endpoint makes what the Hello describes: the same-host offer, or a
// queue pair on the plan's device.
func (h *dialHandshake) endpoint() (*fallback.Hello, error) {
	if h.plan.Offer {
		hello := offerHello(h.plan, h.in.Local)
		e, _ := lookupLink(h.plan.Link)
		p, err := e.ops.(offerer).offer(h.c, hello, h.in.Local, h.deadline)
		if err != nil {
			return nil, err
		}
		h.pending = p
		return hello, nil
	}
	stream, err := streamConfig(h.set.stream, h.plan, h.c)
	if err != nil {
		return nil, err
	}
	ep, err := rsock.NewEndpoint(h.dev.dev, stream)
	if err != nil {
		return nil, err
	}
	h.ep = ep
	return helloFor(h.dev, ep.Params()), nil
}

// exchange sends the Hello and reads the listener's answer. On failure it
// says whether the server looked like a plain TCP server: a plain server
// may already have answered our preface and hung up, failing the Hello's
// write, and what it said tells which.
func exchange(ctx context.Context, c net.Conn, hello *fallback.Hello) (*fallback.Reply, plainness, error) {
	werr := fallback.WriteHello(c, hello)
	reply, err := fallback.ReadReply(c)
	if werr != nil && err == nil {
		err = werr // it answered, but did not read our Hello
	}
	if err == nil {
		return reply, notPlain, nil
	}
	if ctx.Err() != nil {
		return nil, notPlain, ctx.Err()
	}
	var ne net.Error
	switch {
	case errors.Is(err, fallback.ErrEcho):
		// Our own preface came back: a plain echo server, or an rsock
		// listener whose sniff gave up before our preface arrived (it
		// serves us as plain TCP). Only the first is worth remembering,
		// so remember neither.
		return nil, maybePlain, err
	case errors.Is(err, fallback.ErrNotRsock) || errors.Is(err, fallback.ErrVersion):
		return nil, provenPlain, err
	case errors.As(err, &ne) && ne.Timeout() || isEOF(err) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		return nil, maybePlain, err
	}
	return nil, notPlain, err
}

// confirm is the plan's step 3: it checks the listener's Accept against
// the plan, connects the queue pair (on the offered link, once the
// listener connected to it), and confirms; or declines, naming only the
// kind, and stays on TCP.
func (h *dialHandshake) confirm(peer *fallback.Hello) (*Conn, error) {
	h.in.Peer, h.in.Offered = peer, &h.plan
	_, fe := choose(h.in)
	if fe == nil && h.plan.Offer {
		dev, ep, err := h.pending.accept(peer, h.deadline, h.in.Local, h.set.stream)
		if err != nil {
			fe = &FallbackError{Kind: setupKind(err), Side: SideDialer, Err: fmt.Errorf("%s: %w", h.plan.Link, err)}
		} else {
			h.dev, h.ep = dev, ep
		}
	}
	var s *rsock.Stream
	if fe == nil {
		var err error
		s, err = h.ep.Connect(paramsOf(peer), rsock.ConnectOptions{Net: "tcp", LocalAddr: h.c.LocalAddr(), RemoteAddr: h.c.RemoteAddr(), PathRTT: pathRTT(h.c)})
		if err != nil {
			fe = &FallbackError{Kind: FallbackSetup, Side: SideDialer, Err: err}
		}
	}
	if fe != nil {
		h.release()
		if err := fallback.WriteReply(h.c, fallback.Decline(declineText(fe.Kind))); err != nil {
			return nil, err
		}
		h.c.SetDeadline(time.Time{})
		return newTCPConn(h.c, fe), nil
	}
	if err := fallback.WriteReply(h.c, &fallback.Reply{Accept: true, Hello: helloFor(h.dev, h.ep.Params())}); err != nil {
		s.Abort(err)
		s.Close()
		return nil, err // release gives the device back
	}
	dev := h.dev
	h.dev, h.ep = nil, nil // the conn's now
	h.release()            // the offer's socket; its slot went to the device
	h.c.SetDeadline(time.Time{})
	conn := newRDMAConn(h.c, s, dev)
	conn.fallback = h.plan.Note
	return conn, nil
}

// isEOF reports an end of stream before a full reply: a plain server that
// hung up on our preface.
func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
