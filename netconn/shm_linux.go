//go:build linux

package netconn

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/internal/peercred"
	"github.com/rsock-go/rsock/rsock"
	"github.com/rsock-go/rsock/verbs/shm"
)

// shmMaxQPs bounds each side's queue pairs (and completion queues) on one
// channel: a connection takes one queue pair. The arena is address space
// (8 KiB a slot), backed only where slots are in use.
const shmMaxQPs = 1 << 15

// shmRingSize is the stream ring size of an shm connection when none is
// configured, four times rsock's default. With 512 KiB, a 1 MiB write
// waits for the reader to free the ring twice, and reader and writer
// take turns sleeping on each other (`rsockbench local -sizes 1MiB
// -conns 1`: about 1× TCP); with 2 MiB, the writer copies into one half
// while the reader copies out of the other (2.5-3.7×), at less CPU per
// byte on both sides. The ring is address space, backed only where data
// has passed: an idle connection costs none of it.
const shmRingSize = 2 << 20

// shmChannel is a channel between this process and a peer process, with
// the connections that use it counted.
type shmChannel struct {
	dev      *shm.Device
	sd       *sharedDevice // what its connections hold; releasing it drops a reference
	refs     int
	listener bool           // this side took the offer
	remote   netip.AddrPort // on the dialer's side: the listener's TCP address
	timer    *time.Timer    // closes it once unused for its linger time
}

// shmChannels holds the process's channels: on the listener's side by
// ID (what a dialer's offer to reuse names), on the dialer's side by the
// listener's TCP address. The two are apart so that a process that dials
// itself keeps both ends of a channel, which share one ID.
var shmChannels = struct {
	sync.Mutex
	byID       map[uint64]*shmChannel
	toListener map[netip.AddrPort]*shmChannel
	// opening: a dialer is setting a channel to the listener up; other
	// dialers to it wait for that one rather than set up their own.
	opening map[netip.AddrPort]chan struct{}
}{byID: map[uint64]*shmChannel{}, toListener: map[netip.AddrPort]*shmChannel{}, opening: map[netip.AddrPort]chan struct{}{}}

// addShmChannel registers a new channel with one reference.
func addShmChannel(dev *shm.Device, remote netip.AddrPort, listener bool) *shmChannel {
	c := &shmChannel{dev: dev, refs: 1, remote: remote, listener: listener}
	c.sd = &sharedDevice{key: deviceKey{provider: ProviderShm, link: LinkShm}, dev: dev, release: c.release}
	shmChannels.Lock()
	if listener {
		shmChannels.byID[dev.ChannelID()] = c
	} else {
		shmChannels.toListener[remote] = c
	}
	shmChannels.Unlock()
	return c
}

// refLocked counts a new connection on c and returns it, or nil when c
// is nil or has ended. The caller holds shmChannels.
func (c *shmChannel) refLocked() *shmChannel {
	if c == nil || c.dev.Err() != nil {
		return nil
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.refs++
	return c
}

// removeLocked takes c out of the registry. The caller holds shmChannels.
func (c *shmChannel) removeLocked() {
	if c.listener {
		if shmChannels.byID[c.dev.ChannelID()] == c {
			delete(shmChannels.byID, c.dev.ChannelID())
		}
	} else if shmChannels.toListener[c.remote] == c {
		delete(shmChannels.toListener, c.remote)
	}
}

// release drops a connection's reference: the last one closes the
// channel after its linger time, or at once when its peer is gone.
func (c *shmChannel) release() {
	shmChannels.Lock()
	c.refs--
	if c.refs > 0 {
		shmChannels.Unlock()
		return
	}
	linger := shmLinger(c.listener)
	if linger <= 0 || c.dev.Err() != nil {
		c.removeLocked()
		shmChannels.Unlock()
		c.dev.Close()
		return
	}
	c.timer = time.AfterFunc(linger, func() {
		shmChannels.Lock()
		idle := c.refs == 0
		if idle {
			c.removeLocked()
		}
		shmChannels.Unlock()
		if idle {
			c.dev.Close()
		}
	})
	shmChannels.Unlock()
}

// closeIdleShmChannels closes at once the channels no connection uses.
func closeIdleShmChannels() {
	var idle []*shmChannel
	shmChannels.Lock()
	for _, c := range shmChannels.byID {
		if c.refs == 0 {
			idle = append(idle, c)
		}
	}
	for _, c := range shmChannels.toListener {
		if c.refs == 0 {
			idle = append(idle, c)
		}
	}
	for _, c := range idle {
		if c.timer != nil {
			c.timer.Stop()
			c.timer = nil
		}
		c.removeLocked()
	}
	shmChannels.Unlock()
	for _, c := range idle {
		c.dev.Close()
	}
}

// endpoint makes a connection's endpoint (its own protection domain and
// queue pair) on the channel, taking the caller's reference; on failure
// the reference is dropped.
func (c *shmChannel) endpoint(local netip.Addr, stream rsock.Config) (*sharedDevice, *rsock.Endpoint, error) {
	if stream.RingSize == 0 {
		stream.RingSize = shmRingSize
	}
	ep, err := rsock.NewEndpoint(c.dev, stream)
	if err != nil {
		c.release()
		return nil, nil, err
	}
	return c.sd, ep, nil
}

// shmDevices returns the devices of the process's channels (also idle
// ones waiting to close), for Snapshot.
func shmDevices() []*sharedDevice {
	shmChannels.Lock()
	defer shmChannels.Unlock()
	var ds []*sharedDevice
	for _, c := range shmChannels.byID {
		ds = append(ds, c.sd)
	}
	for _, c := range shmChannels.toListener {
		ds = append(ds, c.sd)
	}
	return ds
}

// shmConfig is the configuration of a new channel whose peer must be the
// process at the other end of the TCP connection peer expects.
func shmConfig(peer *peercred.Expect, deadline time.Time) shm.Config {
	return shm.Config{MaxQPs: shmMaxQPs, Deadline: deadline, CheckPeer: func(u *unix.Ucred) error {
		return peer.CheckCred(peercred.Cred{PID: u.Pid, UID: u.Uid, GID: u.Gid})
	}}
}

// available: shm runs on Linux, unless a test turned it off.
func (shmOps) available() error { return shmUnavailable }

// shmUnavailable is what available reports: nil, or in tests why not.
var shmUnavailable error

// errShmOffForTest is why shm is not used in tests that turn it off.
var errShmOffForTest = errors.New("shm turned off by the test")

// offer offers the channel to the listener's process when this process
// has one, else a fresh channel on a new abstract socket.
func (shmOps) offer(tcp net.Conn, h *fallback.Hello, local netip.Addr, deadline time.Time) (pendingOffer, error) {
	peer, err := peercred.ExpectTCPPeer(tcp)
	if err != nil {
		return nil, err
	}
	h.Capabilities |= fallback.CapShm
	dialer, listener := tcpEnds(tcp, false)
	c, opener := reuseShmChannel(peer.Remote, deadline)
	if c != nil {
		// Bound to this connection over the channel (shmbind.go) before
		// the Hello goes out.
		token := newShmToken()
		if err := c.dev.Bind(shmBinding(bindDialer, token, dialer, listener)); err != nil {
			c.release()
			return nil, err
		}
		h.ShmChannel, h.ShmToken = c.dev.ChannelID(), token
		return &shmPending{ch: c, dialer: dialer, listener: listener}, nil
	}
	ln, err := listenShm(shmConfig(peer, deadline))
	if err != nil {
		if opener {
			doneOpening(peer.Remote)
		}
		return nil, err
	}
	p := &shmPending{remote: peer.Remote, ln: ln, done: make(chan struct{}), opener: opener}
	go p.acceptOne()
	h.ShmSocket = ln.Name()
	return p, nil
}

// reuseShmChannel returns the channel to the listener at remote, with a
// reference, waiting until deadline for one that another dialer is
// setting up; or nil, and whether the caller is now the one setting it
// up (it calls doneOpening when it has or failed).
func reuseShmChannel(remote netip.AddrPort, deadline time.Time) (c *shmChannel, opener bool) {
	for {
		shmChannels.Lock()
		if c := shmChannels.toListener[remote].refLocked(); c != nil {
			shmChannels.Unlock()
			return c, false
		}
		wait, busy := shmChannels.opening[remote]
		if !busy {
			shmChannels.opening[remote] = make(chan struct{})
			shmChannels.Unlock()
			return nil, true
		}
		shmChannels.Unlock()
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-wait:
			t.Stop()
		case <-t.C:
			return nil, false // set one up of its own
		}
	}
}

// doneOpening ends a dialer's setting up of a channel to remote.
func doneOpening(remote netip.AddrPort) {
	shmChannels.Lock()
	if ch, ok := shmChannels.opening[remote]; ok {
		delete(shmChannels.opening, remote)
		close(ch)
	}
	shmChannels.Unlock()
}

// listenShm listens for a new channel; tests replace it to make it fail.
var listenShm = func(cfg shm.Config) (*shm.Listener, error) { return shm.Listen("", cfg) }

// connect takes the dialer's offer: the channel it names, if this
// process has it and the dialer bound this connection to it over the
// channel (shmbind.go), else a new channel dialed to the offered socket,
// whose peer must be the TCP peer's process.
func (shmOps) connect(tcp net.Conn, h *fallback.Hello, local netip.Addr, deadline time.Time, stream rsock.Config) (*sharedDevice, *rsock.Endpoint, error) {
	if h.ShmChannel != 0 {
		shmChannels.Lock()
		c := shmChannels.byID[h.ShmChannel].refLocked()
		shmChannels.Unlock()
		if c == nil {
			return nil, nil, errShmNoChannel
		}
		dialer, listener := tcpEnds(tcp, true)
		if !c.dev.TakeBinding(shmBinding(bindDialer, h.ShmToken, dialer, listener)) {
			c.release()
			return nil, nil, errShmUnbound
		}
		return c.endpoint(local, stream)
	}
	peer, err := peercred.ExpectTCPPeer(tcp)
	if err != nil {
		return nil, nil, err
	}
	dev, err := shm.Dial(h.ShmSocket, shmConfig(peer, deadline))
	if err != nil {
		return nil, nil, err
	}
	return addShmChannel(dev, netip.AddrPort{}, true).endpoint(local, stream)
}

// bindReply binds the listener's Accept of a reused channel to the
// connection: its own binding over the channel, its token in reply.
func (shmOps) bindReply(tcp net.Conn, offer, reply *fallback.Hello, sd *sharedDevice) error {
	if offer.ShmChannel == 0 {
		return nil // a new channel: each side checked the other's process
	}
	dev, ok := sd.dev.(*shm.Device)
	if !ok {
		return errors.New("shm: not a channel")
	}
	token := newShmToken()
	dialer, listener := tcpEnds(tcp, true)
	if err := dev.Bind(shmBinding(bindListener, token, dialer, listener)); err != nil {
		return err
	}
	reply.Capabilities |= fallback.CapShm
	reply.ShmChannel, reply.ShmToken = offer.ShmChannel, token
	return nil
}

// shmPending is a dialer's shm offer: a channel to reuse, or a socket
// that accepts one channel from the TCP peer's process.
type shmPending struct {
	dialer   netip.AddrPort // the TCP connection's ends
	listener netip.AddrPort
	remote   netip.AddrPort // the listener's address: the registry's key
	ch       *shmChannel    // a referenced channel, until accept passes it on
	ln       *shm.Listener
	done     chan struct{} // closed when acceptOne ended
	dev      *shm.Device   // the accepted channel, until taken
	err      error         // why none was accepted
	opener   bool          // other dialers to remote wait for this one
}

// acceptOne accepts the first channel from the TCP peer's process; other
// processes fail the peer check and do not end the offer.
func (p *shmPending) acceptOne() {
	defer close(p.done)
	for {
		d, err := p.ln.Accept()
		if err == nil {
			p.dev = d
			p.ln.Close()
			return
		}
		p.err = err
		var oe *net.OpError
		if errors.Is(err, net.ErrClosed) || errors.As(err, &oe) && oe.Op == "accept" {
			return
		}
	}
}

// accept takes the channel (the listener connected to the socket, or
// the one to reuse, which the listener's Accept must be bound to) and
// makes the connection's endpoint on it.
func (p *shmPending) accept(reply *fallback.Hello, deadline time.Time, local netip.Addr, stream rsock.Config) (*sharedDevice, *rsock.Endpoint, error) {
	if p.ln != nil {
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-p.done:
		case <-t.C:
			p.ln.Close()
			<-p.done
		}
		t.Stop()
		if p.dev == nil {
			if p.err == nil || errors.Is(p.err, net.ErrClosed) {
				return nil, nil, errors.New("shm: the peer did not connect in time")
			}
			return nil, nil, p.err
		}
		p.ch, p.dev = addShmChannel(p.dev, p.remote, false), nil
		if p.opener {
			p.opener = false
			doneOpening(p.remote)
		}
	} else if reply.ShmChannel != p.ch.dev.ChannelID() ||
		!p.ch.dev.TakeBinding(shmBinding(bindListener, reply.ShmToken, p.dialer, p.listener)) {
		return nil, nil, errShmUnbound // close releases the channel
	}
	c := p.ch
	p.ch = nil
	return c.endpoint(local, stream)
}

// close withdraws the offer.
func (p *shmPending) close() {
	if p.ln != nil {
		p.ln.Close()
		<-p.done
		if p.dev != nil {
			p.dev.Close()
			p.dev = nil
		}
	}
	if p.ch != nil {
		p.ch.release()
		p.ch = nil
	}
	if p.opener {
		p.opener = false
		doneOpening(p.remote)
	}
}
