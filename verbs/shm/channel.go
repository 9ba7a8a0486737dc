//go:build linux

package shm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs"
)

// Config sets up one side of a channel.
type Config struct {
	// CheckPeer decides whether the process at the other end of the Unix
	// socket (its SO_PEERCRED credentials) may share memory with this
	// one. netconn passes a check that the process is the peer of the
	// TCP handshake. Nil accepts any process of this user.
	CheckPeer func(cred *unix.Ucred) error
	// MaxQPs bounds this side's queue pairs and completion queues on the
	// channel (each costs one slot of the arena: memory is used only
	// for slots in use). Default DefaultMaxQPs.
	MaxQPs int
	// Deadline bounds setting the channel up (Open, Accept, Dial): the
	// peer's hello must arrive before it. Zero: no bound.
	Deadline time.Time
}

// Open sets up a channel over conn, a connected Unix socket of type
// SOCK_SEQPACKET to the peer process, which calls Open on its end: the
// peer's credentials are checked, each side creates its arena and its
// doorbell and sends them, and a goroutine watches the socket for the
// channel's life (the peer's death closes it). The device owns conn from
// then on, also when Open fails.
func Open(conn *net.UnixConn, cfg Config) (_ *Device, err error) {
	defer func() {
		if err != nil {
			conn.Close()
		}
	}()
	if cfg.MaxQPs == 0 {
		cfg.MaxQPs = DefaultMaxQPs
	}
	if cfg.MaxQPs < 1 || cfg.MaxQPs > maxMaxQPs {
		return nil, fmt.Errorf("shm: MaxQPs %d not in [1, %d]: %w", cfg.MaxQPs, maxMaxQPs, verbs.ErrInvalidArgument)
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	if !cfg.Deadline.IsZero() {
		if err := conn.SetDeadline(cfg.Deadline); err != nil {
			return nil, err
		}
	}
	d := &Device{conn: conn, raw: raw, maxQPs: cfg.MaxQPs, port: loopbackPort(),
		qps: map[uint32]*QP{}, peerQPs: map[uint32]*peerQP{},
		peerMRs: map[uint32]*remoteMR{}, mrs: map[uint32]*MR{},
		pendingAk: map[uint32]int{}, slotGen: make([]uint8, cfg.MaxQPs), watchDone: make(chan struct{})}
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		var c *unix.Ucred
		if c, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); cerr == nil {
			d.cred = *c
		}
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("shm: SO_PEERCRED: %w", cerr)
	}
	check := cfg.CheckPeer
	if check == nil {
		check = sameUser
	}
	if err := check(&d.cred); err != nil {
		return nil, err
	}
	size := arenaSize(cfg.MaxQPs)
	fd, err := newMemfd("rsock-shm-arena", size, nil)
	if err != nil {
		return nil, err
	}
	d.arena, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: map arena: %w", err)
	}
	bellFD := -1
	d.bell, bellFD, err = newBell()
	if err != nil {
		unix.Close(fd)
		unix.Munmap(d.arena)
		return nil, err
	}
	u32(d.arena, 0).Store(arenaMagic)
	u32(d.arena, 4).Store(arenaVersion)
	for i := cfg.MaxQPs - 1; i >= 0; i-- {
		d.slotFree = append(d.slotFree, i)
		d.cqFree = append(d.cqFree, i)
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	hello := msg{typ: msgHello, a: arenaVersion, b: uint32(cfg.MaxQPs), x: uint64(size), y: binary.LittleEndian.Uint64(nonce[:])}
	err = d.send(&hello, fd)
	unix.Close(fd)
	if err == nil {
		err = d.send(&msg{typ: msgBell}, bellFD)
	}
	if err == nil {
		err = d.recvHello(hello.y)
	}
	if err == nil && !cfg.Deadline.IsZero() {
		err = conn.SetDeadline(time.Time{}) // the watcher reads for the channel's life
	}
	if err != nil {
		unix.Munmap(d.arena)
		if d.peerMem != nil {
			unix.Munmap(d.peerMem)
		}
		d.bell.Close()
		if d.peerBell != nil {
			unix.Close(d.peerBell.fd)
		}
		return nil, err
	}
	register(d)
	go d.watch()
	return d, nil
}

// sameUser accepts a peer process of this process's user.
func sameUser(c *unix.Ucred) error {
	if int(c.Uid) != os.Getuid() {
		return fmt.Errorf("shm: peer process %d runs as uid %d, not %d", c.Pid, c.Uid, os.Getuid())
	}
	return nil
}

// recvHello waits for the peer's hello and doorbell, maps its arena and
// keeps its doorbell.
func (d *Device) recvHello(nonce uint64) error {
	m, fd, err := d.recvSetup()
	if err != nil {
		return fmt.Errorf("shm: waiting for the peer's hello: %w", err)
	}
	defer unix.Close(fd)
	if m.typ != msgHello || m.a != arenaVersion || m.b < 1 || m.b > maxMaxQPs || m.x != uint64(arenaSize(int(m.b))) {
		return fmt.Errorf("%w: bad hello (type %d, version %d, %d QPs, %d bytes)", ErrViolation, m.typ, m.a, m.b, m.x)
	}
	if err := checkMemfd(fd, m.x); err != nil {
		return fmt.Errorf("%w: arena: %w", ErrViolation, err)
	}
	bm, bfd, err := d.recvSetup()
	if err != nil {
		return fmt.Errorf("shm: waiting for the peer's doorbell: %w", err)
	}
	if bm.typ != msgBell {
		unix.Close(bfd)
		return fmt.Errorf("%w: message type %d where the doorbell belongs", ErrViolation, bm.typ)
	}
	if err := checkEventfd(bfd); err != nil {
		unix.Close(bfd)
		return fmt.Errorf("%w: %w", ErrViolation, err)
	}
	d.peerBell = &peerBell{fd: bfd}
	d.peerBell.free = func() { unix.Close(bfd) }
	d.peerMem, err = unix.Mmap(fd, 0, int(m.x), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("shm: map the peer's arena: %w", err)
	}
	d.peerMax = int(m.b)
	d.id = nonce ^ m.y
	return nil
}

// recvSetup waits for one message during setup (the socket's deadline
// bounds it); fd is -1 when none came with it.
func (d *Device) recvSetup() (m msg, fd int, err error) {
	fd = -1
	rerr := d.raw.Read(func(s uintptr) bool {
		var got bool
		got, m, fd, err = recvOne(int(s))
		return got || err != nil
	})
	if err == nil {
		err = rerr
	}
	return m, fd, err
}

// recvOne receives one message without blocking. got is false when none
// is waiting; err is io.EOF-like when the socket closed.
func recvOne(s int) (got bool, m msg, fd int, err error) {
	var b [msgLen + 1]byte
	var oob [64]byte
	fd = -1
	n, oobn, flags, _, err := unix.Recvmsg(s, b[:], oob[:], unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if err == unix.EAGAIN || err == unix.EINTR {
		return false, m, -1, nil
	}
	if err == unix.ECONNRESET {
		return false, m, -1, errEOF // the peer closed with messages of ours unread
	}
	if err != nil {
		return false, m, -1, fmt.Errorf("shm: channel: %w", err)
	}
	var fds []int
	if oobn > 0 {
		cms, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr == nil {
			for i := range cms {
				f, ferr := unix.ParseUnixRights(&cms[i])
				if ferr == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	closeAll := func() {
		for _, f := range fds {
			unix.Close(f)
		}
	}
	if n == 0 && oobn == 0 {
		return false, m, -1, errEOF
	}
	if flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0 {
		closeAll()
		return false, m, -1, fmt.Errorf("%w: truncated control message", ErrViolation)
	}
	m, err = decodeMsg(b[:n], len(fds))
	if err != nil {
		closeAll()
		return false, m, -1, fmt.Errorf("%w: %w", ErrViolation, err)
	}
	if len(fds) == 1 {
		fd = fds[0]
	}
	return true, m, fd, nil
}

var errEOF = errors.New("shm: channel closed by the peer")

// send sends a control message, with fd when fd >= 0.
func (d *Device) send(m *msg, fd int) error {
	var b [msgLen]byte
	p := m.encode(&b)
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	var err error
	werr := d.raw.Write(func(s uintptr) bool {
		err = unix.Sendmsg(int(s), p, oob, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		return err != unix.EAGAIN
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("shm: channel send: %w", err)
	}
	return nil
}

// watch handles control messages until the socket closes or fails, then
// fails the channel: a peer that dies closes its end at once.
func (d *Device) watch() {
	defer close(d.watchDone)
	var cause error
	graceful := false
	rerr := d.raw.Read(func(s uintptr) bool {
		d.ctlMu.Lock()
		err := d.drainLocked(int(s))
		d.ctlMu.Unlock()
		if err != nil {
			cause = err
			return true
		}
		return false
	})
	switch {
	case cause == errEOF:
		cause, graceful = ErrPeerGone, true
	case cause == nil && rerr != nil:
		cause = fmt.Errorf("shm: channel: %w: %w", rerr, syscall.ECONNRESET)
	case cause == nil:
		cause = ErrPeerGone
	}
	d.fail(cause, graceful)
}

// sync handles the control messages already waiting, so that what the
// peer announced before it published a reference to it is known. The
// caller fails the channel on error, once it released its locks.
func (d *Device) sync() error {
	var err error
	cerr := d.raw.Control(func(s uintptr) {
		d.ctlMu.Lock()
		err = d.drainLocked(int(s))
		d.ctlMu.Unlock()
	})
	if err == nil {
		err = cerr
	}
	if err == errEOF {
		return nil // the watcher sees it too and ends the channel
	}
	return err
}

// drainLocked handles waiting messages until none is left. The caller
// holds ctlMu.
func (d *Device) drainLocked(s int) error {
	for {
		got, m, fd, err := recvOne(s)
		if err != nil || !got {
			return err
		}
		if err := d.handle(&m, fd); err != nil {
			return err
		}
	}
}

// handle applies one control message; fd (if any) is consumed.
func (d *Device) handle(m *msg, fd int) error {
	bad := func(format string, args ...any) error {
		if fd >= 0 {
			unix.Close(fd)
		}
		return fmt.Errorf("%w: "+format, append([]any{ErrViolation}, args...)...)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch m.typ {
	case msgQPNew:
		qpn, slot := m.a, int(m.b)
		if slot >= d.peerMax || qpn&0xffff != uint32(slot) || d.peerQPs[qpn] != nil || m.c >= uint32(d.peerMax) || m.d >= uint32(d.peerMax) {
			return bad("queue pair %#x in slot %d with CQs %d and %d", qpn, slot, m.c, m.d)
		}
		off := slotsOffset(d.peerMax) + slot*slotSize
		p := &peerQP{qpn: qpn, slot: d.peerMem[off : off+slotSize : off+slotSize], pd: m.e,
			recvCQ: newPeerCQ(d.peerMem, d.peerMax, int(m.c)), sendCQ: newPeerCQ(d.peerMem, d.peerMax, int(m.d))}
		p.free = func() { d.queueAck(qpn) }
		d.peerQPs[qpn] = p
	case msgQPGone:
		p := d.peerQPs[m.a]
		if p == nil {
			return bad("unknown queue pair %#x gone", m.a)
		}
		delete(d.peerQPs, m.a)
		// The peer may reuse the slot once we acknowledge, which happens
		// when no send of ours is writing into it any more.
		p.retire()
		// Our queue pairs connected to it fail once what it published
		// into their inbound rings is delivered (leaveIfDrained): wake
		// their waiters to deliver it. A queue pair that connects to it
		// after this look sees it retired (connect).
		for _, q := range d.qps {
			if q.dest.Load() == p {
				q.recvCQ.wakeLocal()
				q.sendCQ.wakeLocal()
			}
		}
	case msgQPAck:
		slot, ok := d.pendingAk[m.a]
		if !ok {
			return bad("acknowledgement of queue pair %#x", m.a)
		}
		delete(d.pendingAk, m.a)
		d.slotFree = append(d.slotFree, slot)
	case msgMRNew:
		rkey, access, addr, length := m.a, verbs.Access(m.c), m.x, m.y
		if len(d.peerMRs) >= 4*d.peerMax {
			return bad("more than %d memory regions", 4*d.peerMax)
		}
		if d.peerMRs[rkey] != nil || length == 0 || length > 1<<40 || addr+length < addr ||
			access&^(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic) != 0 {
			return bad("memory region %#x of %d bytes", rkey, length)
		}
		r, err := mapRemote(fd, rkey, m.b, access, addr, length)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrViolation, err)
		}
		d.peerMRs[rkey] = r
	case msgMRGone:
		r := d.peerMRs[m.a]
		if r == nil {
			return bad("unknown memory region %#x gone", m.a)
		}
		delete(d.peerMRs, m.a)
		r.retire()
	case msgOOL:
		q := d.qps[m.a]
		if q == nil || m.b <= inlineMax || m.b > 1<<31 {
			return bad("out-of-line message of %d bytes for queue pair %#x", m.b, m.a)
		}
		if err := checkMemfd(fd, uint64(m.b)); err != nil {
			unix.Close(fd)
			return fmt.Errorf("%w: %w", ErrViolation, err)
		}
		q.oolMu.Lock()
		q.ool = append(q.ool, oolMsg{fd: fd, n: m.b})
		over := len(q.ool) > ringEntries
		q.oolMu.Unlock()
		if over {
			return bad("more out-of-line messages than ring entries for queue pair %#x", m.a)
		}
	case msgBind:
		d.binds.add(binding{m.x, m.y}, time.Now())
	default:
		return bad("unexpected message type %d", m.typ)
	}
	return nil
}

// queueAck acknowledges the peer's destroyed queue pair qpn. The send
// happens in a goroutine that lives while acknowledgements wait: free
// runs in the watcher too, which must never block on a send (the peer's
// watcher may be blocked sending to us, each socket full).
func (d *Device) queueAck(qpn uint32) {
	d.ackMu.Lock()
	if d.ackShut {
		d.ackMu.Unlock()
		return
	}
	d.acks = append(d.acks, qpn)
	start := !d.acking
	if start {
		d.acking = true
		d.ackWG.Add(1)
	}
	d.ackMu.Unlock()
	if start {
		go d.sendAcks()
	}
}

// sendAcks sends the waiting acknowledgements until none is left or the
// channel fails.
func (d *Device) sendAcks() {
	defer d.ackWG.Done()
	for {
		d.ackMu.Lock()
		acks := d.acks
		d.acks = nil
		if len(acks) == 0 {
			d.acking = false
			d.ackMu.Unlock()
			return
		}
		d.ackMu.Unlock()
		for _, qpn := range acks {
			if d.send(&msg{typ: msgQPAck, a: qpn}, -1) != nil {
				d.ackMu.Lock()
				d.acks, d.acking = nil, false
				d.ackMu.Unlock()
				return // the channel failed: the peer frees everything anyway
			}
		}
	}
}

// Pair returns two devices connected by a channel inside this process,
// for tests and benchmarks.
func Pair(cfg Config) (*Device, *Device, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("shm: socketpair: %w", err)
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "shm-channel")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				unix.Close(fds[1])
			}
			return nil, nil, err
		}
		conns[i] = c.(*net.UnixConn)
	}
	type res struct {
		d   *Device
		err error
	}
	ch := make(chan res, 1)
	go func() {
		d, err := Open(conns[1], cfg)
		ch <- res{d, err}
	}()
	a, err := Open(conns[0], cfg)
	r := <-ch
	if err != nil || r.err != nil {
		if a != nil {
			a.Close()
		}
		if r.d != nil {
			r.d.Close()
		}
		return nil, nil, errors.Join(err, r.err)
	}
	return a, r.d, nil
}
