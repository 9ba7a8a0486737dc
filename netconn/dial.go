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

// negotiate runs the dialer's side of the handshake on c. It reports
// whether the server looked plain; otherwise it returns a conn, on the TCP
// path when the plan, the listener or the setup says so.
func (d *Dialer) negotiate(ctx context.Context, c net.Conn, set settings) (_ *Conn, plain plainness, _ error) {
	local := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr()
	remote := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
	// Step 1: the plan, before anything is sent. Without one the conn is
	// plain TCP and no preface is sent.
	in := planInput(set, SideDialer, local, remote)
	plan, dev, fe := acquirePlanned(in)
	if fe != nil {
		return newTCPConn(c, fe), notPlain, nil
	}
	timeout := d.HandshakeTimeout
	if timeout <= 0 {
		timeout = DefaultHandshakeTimeout
	}
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	// The preface goes first, so that the listener's sniff does not wait
	// for the endpoint's setup.
	var cleanup []func()
	fail := func() {
		for _, f := range cleanup {
			f()
		}
		cleanup = nil
	}
	if dev != nil {
		cleanup = append(cleanup, func() { releaseDevice(dev) })
	}
	if err := fallback.WritePreface(c); err != nil {
		fail()
		return nil, notPlain, err
	}
	var (
		hello   *fallback.Hello
		ep      *rsock.Endpoint
		pending pendingOffer
		err     error
	)
	if plan.Offer {
		hello = offerHello(plan, local)
		e, _ := lookupLink(plan.Link)
		pending, err = e.ops.(offerer).offer(hello, local, deadline)
		if err == nil {
			cleanup = append(cleanup, pending.close)
		}
	} else {
		var stream rsock.Config
		stream, err = streamConfig(set.stream, plan, c)
		if err == nil {
			ep, err = rsock.NewEndpoint(dev.dev, dev.pd, stream)
		}
		if err == nil {
			cleanup = append([]func(){func() { ep.Close() }}, cleanup...)
			hello = helloFor(dev, ep.Params())
		}
	}
	if err != nil {
		// The listener waits for a Hello that will not come: start over
		// on plain TCP.
		fail()
		return nil, maybePlain, err
	}
	defer fail()
	werr := fallback.WriteHello(c, hello)
	reply, err := fallback.ReadReply(c)
	if werr != nil && err == nil {
		err = werr // it answered, but did not read our Hello
	}
	if err != nil {
		// A plain server may already have answered our preface and hung
		// up, failing the Hello's write: what it said tells which.
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
	if !reply.Accept {
		fail()
		c.SetDeadline(time.Time{})
		return newTCPConn(c, fromDecline(reply.Reason, SideListener)), notPlain, nil
	}
	// Step 3: check the listener's answer against the plan, and connect.
	in.Peer, in.Offered = reply.Hello, &plan
	var s *rsock.Stream
	_, fe = choose(in)
	if fe == nil && plan.Offer {
		dev, ep, err = pending.accept(deadline, local, set.stream)
		if err != nil {
			fe = &FallbackError{Kind: FallbackSetup, Side: SideDialer, Err: fmt.Errorf("%s: %w", plan.Link, err)}
		} else {
			cleanup = append([]func(){func() { ep.Close(); releaseDevice(dev) }}, cleanup...)
		}
	}
	if fe == nil {
		s, err = ep.Connect(paramsOf(reply.Hello), rsock.ConnectOptions{Net: "tcp", LocalAddr: c.LocalAddr(), RemoteAddr: c.RemoteAddr()})
		if err != nil {
			fe = &FallbackError{Kind: FallbackSetup, Side: SideDialer, Err: err}
		}
	}
	if fe != nil {
		// Tell the listener the kind, and stay on TCP.
		fail()
		if werr := fallback.WriteReply(c, fallback.Decline(declineText(fe.Kind))); werr != nil {
			return nil, notPlain, werr
		}
		c.SetDeadline(time.Time{})
		return newTCPConn(c, fe), notPlain, nil
	}
	if err := fallback.WriteReply(c, &fallback.Reply{Accept: true, Hello: helloFor(dev, ep.Params())}); err != nil {
		s.Abort(err)
		s.Close()
		releaseDevice(dev)
		if pending != nil {
			pending.close()
		}
		cleanup = nil
		return nil, notPlain, err
	}
	cleanup = nil // the conn owns the stream and the device now
	if pending != nil {
		pending.close() // the offer's socket; its slot went to the device
	}
	c.SetDeadline(time.Time{})
	conn := newRDMAConn(c, s, dev)
	conn.fallback = plan.Note
	return conn, notPlain, nil
}

// isEOF reports an end of stream before a full reply: a plain server that
// hung up on our preface.
func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
