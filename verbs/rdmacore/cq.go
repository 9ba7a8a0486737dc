//go:build rdmacore

package rdmacore

// #include "shim.h"
import "C"

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/rsock-go/rsock/verbs"
	"golang.org/x/sys/unix"
)

// pollBatch is how many completions one cgo call moves at most.
const pollBatch = 64

// CQ is a completion queue (ibv_cq) with its own completion channel. A
// goroutine waits on the channel's non-blocking fd through the runtime's
// network poller (a parked goroutine, no OS thread), acknowledges each
// event, re-arms the CQ and leaves a token on the Notify channel.
type CQ struct {
	dev *Device
	cq  *C.struct_ibv_cq
	ch  *C.struct_ibv_comp_channel
	// file is a duplicate of the channel's fd, registered with the
	// poller; closing it wakes the watcher for good.
	file *os.File
	rc   syscall.RawConn

	mu      sync.Mutex // guards the fields below and polling cq
	ahead   []verbs.WC // completions Wait polled ahead of Poll
	scratch []C.struct_rs_wc
	closed  bool
	broken  error // an async event's CQ error: Poll and Wait return it

	notify  chan struct{}
	done    chan struct{}
	watched sync.WaitGroup
	once    sync.Once
	err     error
}

var _ verbs.CQ = (*CQ)(nil)

// CreateCQ creates a completion queue with room for at least depth
// completions.
func (d *Device) CreateCQ(depth int) (verbs.CQ, error) {
	if depth <= 0 || depth > 1<<22 {
		return nil, fmt.Errorf("rdmacore: CQ depth %d: %w", depth, verbs.ErrInvalidArgument)
	}
	d.objMu.Lock()
	defer d.objMu.Unlock()
	if d.closed.Load() {
		return nil, verbs.ErrClosed
	}
	ch, err := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		return nil, callErr("ibv_create_comp_channel", errnoOf(err))
	}
	c := &CQ{dev: d, ch: ch, notify: make(chan struct{}, 1), done: make(chan struct{}),
		scratch: make([]C.struct_rs_wc, pollBatch)}
	fail := func(err error) (verbs.CQ, error) {
		if c.file != nil {
			c.file.Close()
		}
		if c.cq != nil {
			C.ibv_destroy_cq(c.cq)
		}
		C.ibv_destroy_comp_channel(ch)
		return nil, err
	}
	if rc := C.rs_nonblock(ch.fd); rc != 0 {
		return fail(callErr("fcntl O_NONBLOCK on the completion channel", syscall.Errno(rc)))
	}
	fd, err := unix.FcntlInt(uintptr(ch.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("rdmacore: dup the completion channel: %w", err))
	}
	c.file = os.NewFile(uintptr(fd), "ibv_comp_channel")
	if c.rc, err = c.file.SyscallConn(); err != nil {
		return fail(fmt.Errorf("rdmacore: completion channel: %w", err))
	}
	cq, err := C.ibv_create_cq(d.ctx, C.int(depth), nil, ch, 0)
	if cq == nil {
		return fail(callErr(fmt.Sprintf("ibv_create_cq of %d", depth), errnoOf(err)))
	}
	c.cq = cq
	if rc := C.rs_req_notify(cq); rc != 0 {
		return fail(callErr("ibv_req_notify_cq", syscall.Errno(rc)))
	}
	d.cqs[c] = struct{}{}
	c.watched.Add(1)
	go c.watch()
	return c, nil
}

// watch turns completion events into Notify tokens until the CQ closes.
// The CQ is armed before each wait, and a token follows each arming, so a
// completion that came before the arming is not missed (the token may be
// stale: Poll says).
func (c *CQ) watch() {
	defer c.watched.Done()
	for {
		c.signal()
		var rc C.int
		err := c.rc.Read(func(uintptr) bool {
			cgoCalls.Add(1)
			rc = C.rs_get_event(c.ch)
			return rc != C.EAGAIN
		})
		if err != nil || rc != 0 {
			return // the file was closed, or the channel is broken
		}
		select {
		case <-c.done:
			return
		default:
		}
		cgoCalls.Add(1)
		if C.rs_req_notify(c.cq) != 0 {
			return // the CQ is broken: Poll reports it
		}
	}
}

func (c *CQ) signal() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Poll moves up to len(wcs) completions into wcs, with one cgo call per
// 64.
func (c *CQ) Poll(wcs []verbs.WC) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, verbs.ErrClosed
	}
	if c.broken != nil {
		return 0, c.broken
	}
	k := copy(wcs, c.ahead)
	c.ahead = c.ahead[:copy(c.ahead, c.ahead[k:])]
	for k < len(wcs) {
		want := min(len(wcs)-k, pollBatch)
		n, err := c.pollLocked(wcs[k:])
		k += n
		if err != nil {
			return k, err
		}
		if n < want {
			break // the queue is empty
		}
	}
	return k, nil
}

// pollLocked polls at most one batch into wcs. The caller holds c.mu.
func (c *CQ) pollLocked(wcs []verbs.WC) (int, error) {
	m := min(len(wcs), pollBatch)
	cgoCalls.Add(1)
	got := int(C.rs_poll(c.cq, &c.scratch[0], C.int(m)))
	if got < 0 {
		return 0, callErr("ibv_poll_cq", syscall.Errno(-got))
	}
	for i, w := range c.scratch[:got] {
		wcs[i] = verbs.WC{
			WRID:      uint64(w.id),
			Status:    verbs.WCStatus(w.status),
			Opcode:    verbs.WCOpcode(w.opcode),
			Flags:     verbs.WCFlags(w.flags) & verbs.WCWithImm,
			ByteLen:   uint32(w.byte_len),
			Imm:       uint32(w.imm),
			QPN:       uint32(w.qpn),
			VendorErr: uint32(w.vendor_err),
		}
	}
	return got, nil
}

// Wait blocks until the CQ holds a completion, ctx ends, or the CQ is
// closed. A completion it finds waits for Poll.
func (c *CQ) Wait(ctx context.Context) error {
	var one [1]verbs.WC
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return verbs.ErrClosed
		}
		if len(c.ahead) > 0 || c.broken != nil {
			err := c.broken
			c.mu.Unlock()
			return err
		}
		n, err := c.pollLocked(one[:])
		if n > 0 {
			c.ahead = append(c.ahead, one[0])
		}
		c.mu.Unlock()
		if n > 0 || err != nil {
			return err
		}
		select {
		case <-c.notify:
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Notify returns the channel that receives a token after completion
// events.
func (c *CQ) Notify() <-chan struct{} { return c.notify }

// Close destroys the CQ and its completion channel. It is idempotent;
// it fails with verbs.ErrBusy (and stays open) while a QP uses the CQ.
func (c *CQ) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	if users := c.dev.cqUsers(c); users > 0 {
		c.mu.Unlock()
		return fmt.Errorf("rdmacore: CQ used by %d QPs: %w", users, verbs.ErrBusy)
	}
	c.closed = true
	close(c.done)
	c.mu.Unlock()
	c.file.Close() // wakes the watcher
	c.watched.Wait()
	var err error
	if rc, e := C.ibv_destroy_cq(c.cq); rc != 0 {
		err = callErr("ibv_destroy_cq", errnoOf(e))
	}
	if rc, e := C.ibv_destroy_comp_channel(c.ch); rc != 0 && err == nil {
		err = callErr("ibv_destroy_comp_channel", errnoOf(e))
	}
	c.dev.objMu.Lock()
	delete(c.dev.cqs, c)
	c.dev.objMu.Unlock()
	return err
}

// cqUsers counts the QPs that use c.
func (d *Device) cqUsers(c *CQ) int {
	d.objMu.Lock()
	pds := make([]*PD, 0, len(d.pds))
	for p := range d.pds {
		pds = append(pds, p)
	}
	d.objMu.Unlock()
	n := 0
	for _, p := range pds {
		p.mu.Lock()
		for q := range p.qps {
			if q.scq == c || q.rcq == c {
				n++
			}
		}
		p.mu.Unlock()
	}
	return n
}
