//go:build rdmacore

package rdmacore

// #include "shim.h"
import "C"

import (
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"unsafe"

	"github.com/rsock-go/rsock/verbs"
	"golang.org/x/sys/unix"
)

// asyncEvent is one async event of the device, acknowledged already.
type asyncEvent struct {
	kind int
	qpn  uint32  // the QP of a QP event
	cq   uintptr // the ibv_cq of a CQ event
	port int     // the port of a port event
}

// watchAsync starts the goroutine that reads the device's async events:
// its non-blocking async fd is waited on through the runtime's poller (a
// parked goroutine, no OS thread), as the completion channels are.
func (d *Device) watchAsync() error {
	if rc := C.rs_nonblock(d.ctx.async_fd); rc != 0 {
		return callErr("fcntl O_NONBLOCK on the async event fd", syscall.Errno(rc))
	}
	fd, err := unix.FcntlInt(uintptr(d.ctx.async_fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("rdmacore: dup the async event fd: %w", err)
	}
	d.asyncFile = os.NewFile(uintptr(fd), "ibv_async_fd")
	rc, err := d.asyncFile.SyscallConn()
	if err != nil {
		d.asyncFile.Close()
		return fmt.Errorf("rdmacore: async event fd: %w", err)
	}
	d.asyncDone.Add(1)
	go func() {
		defer d.asyncDone.Done()
		for {
			var ev C.struct_rs_async
			var got C.int
			err := rc.Read(func(uintptr) bool {
				got = C.rs_get_async(d.ctx, &ev)
				return got != C.EAGAIN
			})
			if err != nil || got != 0 {
				return // Close closed the file, or the fd is broken
			}
			d.handleAsync(asyncEvent{kind: int(ev.kind), qpn: uint32(ev.qpn), cq: uintptr(ev.cq), port: int(ev.port)})
		}
	}()
	return nil
}

// stopAsync ends the event goroutine; the device is closed after it.
func (d *Device) stopAsync() {
	if d.asyncFile != nil {
		d.asyncFile.Close() // wakes the watcher
		d.asyncDone.Wait()
	}
}

// handleAsync logs an event and fails what it names: the QPs move to the
// error state with the event as their Cause, so that their posted
// requests complete flushed and the connection over them reports the
// event (wrapping ECONNRESET); a CQ that overran fails its Polls.
func (d *Device) handleAsync(ev asyncEvent) {
	name := eventName(ev.kind)
	act := asyncActionOf(ev.kind)
	log := slog.Debug
	if act != actNote {
		log = slog.Warn
	}
	log("rdmacore: async event", "device", d.name, "event", name, "qpn", ev.qpn, "port", ev.port)
	if act == actNote {
		return
	}
	cause := asyncCause(d.name, name, ev, act)
	var cqs []*CQ
	if act == actFailCQ {
		d.objMu.Lock()
		for c := range d.cqs {
			if uintptr(unsafe.Pointer(c.cq)) == ev.cq {
				cqs = append(cqs, c)
			}
		}
		d.objMu.Unlock()
		for _, c := range cqs {
			c.fail(cause)
		}
	}
	for _, q := range d.allQPs() {
		hit := act == actFailPort || act == actFailDevice || (act == actFailQP && q.qpn == ev.qpn)
		for _, c := range cqs {
			hit = hit || q.scq == c || q.rcq == c
		}
		if hit {
			q.fail(cause)
		}
	}
}

// asyncCause is the error an event leaves on the QPs it fails. It wraps
// ECONNRESET (the connection is lost), and for a CQ overrun
// verbs.ErrCQOverrun.
func asyncCause(dev, name string, ev asyncEvent, act asyncAction) error {
	switch act {
	case actFailQP:
		return fmt.Errorf("rdmacore: %s: async event %q on QP %d: %w", dev, name, ev.qpn, syscall.ECONNRESET)
	case actFailCQ:
		return fmt.Errorf("rdmacore: %s: async event %q: %w: %w", dev, name, verbs.ErrCQOverrun, syscall.ECONNRESET)
	case actFailPort:
		return fmt.Errorf("rdmacore: %s: async event %q on port %d: %w", dev, name, ev.port, syscall.ECONNRESET)
	}
	return fmt.Errorf("rdmacore: %s: async event %q: %w", dev, name, syscall.ECONNRESET)
}

// allQPs lists the device's QPs.
func (d *Device) allQPs() []*QP {
	d.objMu.Lock()
	pds := make([]*PD, 0, len(d.pds))
	for p := range d.pds {
		pds = append(pds, p)
	}
	d.objMu.Unlock()
	var qps []*QP
	for _, p := range pds {
		p.mu.Lock()
		for q := range p.qps {
			qps = append(qps, q)
		}
		p.mu.Unlock()
	}
	return qps
}

// fail records cause (the first one stays) and moves the QP to the error
// state, which flushes its posted work requests.
func (q *QP) fail(cause error) {
	q.cause.CompareAndSwap(nil, &cause)
	q.life.RLock()
	defer q.life.RUnlock()
	if !q.closed {
		C.rs_to_error(q.qp) // a QP already in error stays there
	}
}

// Cause returns the async event that failed the QP, or nil (verbs.Causer).
func (q *QP) Cause() error {
	if c := q.cause.Load(); c != nil {
		return *c
	}
	return nil
}

// fail makes the CQ's Poll and Wait return err from now on, and wakes
// its waiters.
func (c *CQ) fail(err error) {
	c.mu.Lock()
	if c.broken == nil {
		c.broken = err
	}
	c.mu.Unlock()
	c.signal()
}
