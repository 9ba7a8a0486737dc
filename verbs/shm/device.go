//go:build linux

package shm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs"
)

// Names the device reports.
const (
	ProviderName = "shm"
	LinkName     = "shm"
)

// ErrPeerGone is the cause of a queue pair's failure when the peer
// process closed the channel or died. It wraps ECONNRESET.
var ErrPeerGone = fmt.Errorf("shm: the peer process closed the channel: %w", syscall.ECONNRESET)

// ErrQPGone is the cause of a queue pair's failure when the peer
// destroyed the queue pair it is connected to (the channel lives on). It
// wraps ECONNRESET.
var ErrQPGone = fmt.Errorf("shm: the peer destroyed its queue pair: %w", syscall.ECONNRESET)

// ErrViolation is the cause when the peer broke the channel's rules
// (garbage in shared memory, a bad control message). It wraps
// ECONNRESET: the channel is torn down.
var ErrViolation = fmt.Errorf("shm: the peer broke the shared-memory protocol: %w", syscall.ECONNRESET)

// Device is one side of a channel between two processes: queue pairs on
// it connect to queue pairs of the peer process's device.
type Device struct {
	conn    *net.UnixConn
	raw     syscall.RawConn
	cred    unix.Ucred
	id      uint64
	maxQPs  int
	arena   []byte // ours, mapped by the peer
	peerMem []byte // the peer's arena
	peerMax int
	port    verbs.PortAttr

	ctlMu sync.Mutex // serialises receiving and handling control messages

	mu        sync.Mutex
	closed    bool
	dead      error // why the channel ended; nil while it works
	qps       map[uint32]*QP
	slotFree  []int
	slotGen   []uint8
	cqIdx     []*CQ // the CQs in use, by index (for the doorbell goroutine)
	cqFree    []int
	peerQPs   map[uint32]*peerQP
	peerMRs   map[uint32]*remoteMR
	nextPD    uint32
	pendingAk map[uint32]int // our destroyed QPs' slots, until the peer acknowledges
	binds     bindings       // what the peer bound to its connections (Bind), until taken

	mrMu sync.RWMutex
	mrs  map[uint32]*MR // by lkey

	watchDone chan struct{}

	ackMu   sync.Mutex
	acks    []uint32 // acknowledgements of the peer's destroyed QPs, to send
	acking  bool     // sendAcks runs
	ackShut bool     // Close waits for sendAcks: no more acknowledgements
	ackWG   sync.WaitGroup

	bell     *os.File  // our doorbell, an eventfd the peer rings; fail closes it
	peerBell *peerBell // the peer's doorbell

	bellMu             sync.Mutex // the turn to read the doorbell (bell.go)
	reading            bool       // a sleeper holds the turn
	readerCQ           *CQ        // the CQ the reader sleeps on, while it reads
	readToken          uint64     // changes with every reader
	bellShut           bool       // the doorbell is closed: sleepers only wait
	waitHead, waitTail *bellWaiter

	rings atomic.Uint64 // doorbells rung at the peer (for tests)
}

var _ verbs.Device = (*Device)(nil)

// peerQP is what the peer announced about one of its queue pairs.
type peerQP struct {
	pin    // retired when the peer destroys it; freeing acknowledges
	qpn    uint32
	slot   []byte // its inbound ring, in the peer's arena
	recvCQ peerCQ
	sendCQ peerCQ
	pd     uint32
}

// Name returns "shm:" and the peer's process id.
func (d *Device) Name() string { return fmt.Sprintf("shm:%d", d.cred.Pid) }

// Provider returns "shm".
func (d *Device) Provider() string { return ProviderName }

// Link returns "shm".
func (d *Device) Link() string { return LinkName }

// Port describes the device's one port: active, 4096-byte MTU, and the
// loopback address as its GID (peers are found by channel, not address).
func (d *Device) Port() verbs.PortAttr { return d.port }

// PeerCred returns the peer process's credentials (SO_PEERCRED).
func (d *Device) PeerCred() unix.Ucred { return d.cred }

// ChannelID is a random number both ends of the channel report alike.
func (d *Device) ChannelID() uint64 { return d.id }

// Counters returns zero counts: shared memory has no packets to count.
func (d *Device) Counters() verbs.Counters { return verbs.Counters{} }

// Err returns why the channel ended, or nil while it works.
func (d *Device) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dead
}

// Done returns a channel closed once the channel's watcher ended (the
// channel failed or the device was closed).
func (d *Device) Done() <-chan struct{} { return d.watchDone }

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, verbs.ErrClosed
	}
	d.nextPD++
	return &PD{dev: d, id: d.nextPD}, nil
}

// Close fails every queue pair, closes the channel and unmaps both
// arenas and every mapping of the peer's memory. It is idempotent.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.fail(fmt.Errorf("shm: device closed: %w", verbs.ErrClosed), false)
	<-d.watchDone
	d.ackMu.Lock()
	d.ackShut = true
	d.ackMu.Unlock()
	d.ackWG.Wait()
	d.mu.Lock()
	qps := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	cqs := d.cqsInUse()
	d.mu.Unlock()
	var errs []error
	for _, q := range qps {
		errs = append(errs, q.Close())
	}
	for _, c := range cqs {
		errs = append(errs, c.Close())
	}
	d.mrMu.Lock()
	mrs := d.mrs
	d.mrs = map[uint32]*MR{}
	d.mrMu.Unlock()
	for _, m := range mrs {
		errs = append(errs, m.Close())
	}
	d.mu.Lock()
	for _, r := range d.peerMRs {
		r.retire()
	}
	d.peerMRs = nil
	if d.peerBell != nil {
		d.peerBell.retire()
	}
	d.peerQPs = nil
	d.mu.Unlock()
	if d.peerMem != nil {
		errs = append(errs, unix.Munmap(d.peerMem))
	}
	errs = append(errs, unix.Munmap(d.arena))
	return errors.Join(errs...)
}

// fail ends the channel once: the socket is closed (the peer learns at
// once), and every queue pair moves to the error state. When graceful,
// what the peer delivered before it left is completed first.
func (d *Device) fail(cause error, graceful bool) {
	d.mu.Lock()
	if d.dead != nil {
		d.mu.Unlock()
		return
	}
	d.dead = cause
	unregister(d)
	qps := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	cqs := d.cqsInUse()
	d.mu.Unlock()
	d.conn.Close()
	d.bellMu.Lock()
	d.bellShut = true
	d.bellMu.Unlock()
	d.bell.Close() // a reader of the doorbell leaves
	for _, q := range qps {
		q.peerGone(cause, graceful)
	}
	for _, c := range cqs {
		c.wakeLocal()
	}
}

// cqsInUse lists the CQs in use. The caller holds mu.
func (d *Device) cqsInUse() []*CQ {
	var cqs []*CQ
	for _, c := range d.cqIdx {
		if c != nil {
			cqs = append(cqs, c)
		}
	}
	return cqs
}

// deadErr returns the channel's failure, or nil.
func (d *Device) deadErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dead
}

// lookupMR returns the local MR with lkey.
func (d *Device) lookupMR(lkey uint32) *MR {
	d.mrMu.RLock()
	m := d.mrs[lkey]
	d.mrMu.RUnlock()
	return m
}

// lookupAddr returns the local MR of pd holding [addr, addr+n), for
// inline requests whose keys are not checked.
func (d *Device) lookupAddr(pd *PD, addr uint64, n uint32) *MR {
	d.mrMu.RLock()
	defer d.mrMu.RUnlock()
	for _, m := range d.mrs {
		if m.pd == pd && m.contains(addr, n) {
			return m
		}
	}
	return nil
}

// randKey returns an unpredictable nonzero key.
func randKey() uint32 {
	var b [4]byte
	for {
		rand.Read(b[:])
		if k := binary.LittleEndian.Uint32(b[:]); k != 0 {
			return k
		}
	}
}

func loopbackPort() verbs.PortAttr {
	return verbs.PortAttr{State: verbs.PortActive, MaxMTU: verbs.MTU4096, ActiveMTU: verbs.MTU4096,
		GIDs: []verbs.GID{verbs.GIDFromAddr(netip.AddrFrom4([4]byte{127, 0, 0, 1}))}}
}

func init() {
	verbs.RegisterProvider(ProviderName, func(netip.Addr) (verbs.Device, error) {
		return nil, fmt.Errorf("shm: devices are opened per peer process over a Unix socket (shm.Open), not by address: %w", verbs.ErrNoDevice)
	})
}
