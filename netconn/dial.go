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
	// Link is the soft-RoCE link; empty means $RSOCK_LINK, else udp.
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
			c.(*Conn).reason = "the address answered like a plain TCP server recently, and is remembered as one for a few minutes"
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
			pc.(*Conn).reason = "the server did not complete the rsock handshake: " + err.Error()
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
	return newTCPConn(c, ""), nil
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
// path when RDMA is declined or cannot start.
func (d *Dialer) negotiate(ctx context.Context, c net.Conn, set settings) (_ *Conn, plain plainness, _ error) {
	local := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr()
	remote := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
	dev, why, err := acquireFor(set, local)
	if err != nil {
		return newTCPConn(c, err.Error()), notPlain, nil // no usable provider: plain TCP, no preface sent
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
	if err := fallback.WritePreface(c); err != nil {
		releaseDevice(dev)
		return nil, notPlain, err
	}
	stream, err := streamConfig(set.stream, c)
	var ep *rsock.Endpoint
	if err == nil {
		ep, err = rsock.NewEndpoint(dev.dev, stream)
	}
	if err != nil {
		// The listener waits for a Hello that will not come: start over
		// on plain TCP.
		releaseDevice(dev)
		return nil, maybePlain, err
	}
	fail := func() { ep.Close(); releaseDevice(dev) }
	hello := helloFor(dev, ep.Params())
	var (
		offer     *memifOffer
		memifWhy  string // why a same-host connection is not on memif
		wantMemif = set.memif() && sameHost(local, remote)
	)
	memifSlot := false // a slot from reserveMemif, until acceptOffer takes it
	defer func() {
		if memifSlot {
			releaseMemif()
		}
	}()
	if wantMemif && !reserveMemif() {
		memifWhy = errMemifFull.Error()
	} else if wantMemif {
		memifSlot = true
		if offer, err = newMemifOffer(c, local, deadline); err != nil {
			memifWhy = err.Error()
		} else {
			defer offer.close()
			hello.Capabilities |= fallback.CapMemif
			hello.MemifSocket, hello.MemifSecret = offer.socket, offer.secret
		}
	} else if set.link == LinkMemif && set.wire == "" {
		memifWhy = fmt.Sprintf("the peer %v is not on this host", remote)
	}
	werr := fallback.WriteHello(c, hello)
	reply, err := fallback.ReadReply(c)
	if werr != nil && err == nil {
		err = werr // it answered, but did not read our Hello
	}
	if err != nil {
		// A plain server may already have answered our preface and hung
		// up, failing the Hello's write: what it said tells which.
		fail()
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
		return newTCPConn(c, "declined by the listener: "+reply.Reason), notPlain, nil
	}
	if reply.Hello.Link != LinkMemif && wantMemif && memifWhy == "" {
		memifWhy = "the listener did not take the memif offer"
		if reply.Reason != "" {
			memifWhy = reply.Reason
		}
	}
	var s *rsock.Stream
	switch {
	case reply.Hello.Link == LinkMemif && offer != nil:
		// The listener connected to our offer: move to a queue pair on
		// that link, and let the udp endpoint go.
		var mdev *sharedDevice
		var mep *rsock.Endpoint
		memifSlot = false
		mdev, mep, err = acceptOffer(offer, deadline, local, set.stream)
		if err != nil {
			err = fmt.Errorf("memif: %w", err)
			break
		}
		fail()
		dev, ep = mdev, mep
		fail = func() { ep.Close(); releaseDevice(dev) }
		s, err = ep.Connect(paramsOf(reply.Hello), rsock.ConnectOptions{Net: "tcp", LocalAddr: c.LocalAddr(), RemoteAddr: c.RemoteAddr()})
	case set.link == LinkMemif && set.wire == "":
		err = errors.New("memif is required and not possible: " + memifWhy)
	case compatible(dev, reply.Hello):
		s, err = ep.Connect(paramsOf(reply.Hello), rsock.ConnectOptions{Net: "tcp", LocalAddr: c.LocalAddr(), RemoteAddr: c.RemoteAddr()})
	default:
		err = fmt.Errorf("peer link %q is not compatible", reply.Hello.Link)
	}
	if err != nil {
		// Tell the listener, and stay on TCP.
		fail()
		if werr := fallback.WriteReply(c, fallback.Decline(err.Error())); werr != nil {
			return nil, notPlain, werr
		}
		c.SetDeadline(time.Time{})
		return newTCPConn(c, err.Error()), notPlain, nil
	}
	if err := fallback.WriteReply(c, &fallback.Reply{Accept: true, Hello: helloFor(dev, ep.Params())}); err != nil {
		s.Abort(err)
		s.Close()
		releaseDevice(dev)
		return nil, notPlain, err
	}
	c.SetDeadline(time.Time{})
	conn := newRDMAConn(c, s, dev)
	if memifWhy != "" {
		conn.reason = "memif: " + memifWhy
	} else if dev.dev.Link() != LinkMemif {
		conn.reason = why // on memif, rdma-core was not wanted anyway
	}
	return conn, notPlain, nil
}

// isEOF reports an end of stream before a full reply: a plain server that
// hung up on our preface.
func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
