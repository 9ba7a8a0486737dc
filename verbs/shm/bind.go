//go:build linux

package shm

import (
	"encoding/binary"
	"time"
)

// Bindings let a user of a channel tie something outside it to the peer
// process: only the process at the other end of the channel's socket can
// send on it. netconn binds every connection that reuses a channel to
// it: each side sends a binding derived from a fresh token and the TCP
// connection's addresses here, and the token over TCP; the other side
// takes the binding only if it arrived on this channel.

// BindingLen is the length of a binding.
const BindingLen = 16

// maxBindings bounds the bindings a device keeps untaken; past it the
// oldest go. bindingTTL is how long one is kept: a handshake is long
// over by then.
const (
	maxBindings = 1 << 14
	bindingTTL  = time.Minute
)

type binding struct{ x, y uint64 }

func bindingOf(b [BindingLen]byte) binding {
	return binding{binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])}
}

// bindings is a bounded set of received bindings, oldest first. The
// device's mu guards it.
type bindings struct {
	set   map[binding]time.Time
	order []bindingAt
}

type bindingAt struct {
	b  binding
	at time.Time
}

// add records b, received at now, dropping expired ones and, past
// maxBindings, the oldest.
func (s *bindings) add(b binding, now time.Time) {
	if s.set == nil {
		s.set = map[binding]time.Time{}
	}
	for len(s.order) > 0 {
		o := s.order[0]
		at, live := s.set[o.b]
		live = live && at.Equal(o.at)
		if live && len(s.set) < maxBindings && now.Sub(o.at) <= bindingTTL {
			break
		}
		s.order = s.order[1:]
		if live {
			delete(s.set, o.b)
		}
	}
	if _, dup := s.set[b]; dup {
		return // the first stays; taking it takes both
	}
	s.set[b] = now
	s.order = append(s.order, bindingAt{b, now})
	if len(s.order) > 4*maxBindings {
		// Taken ones behind an old untaken one: keep the live ones only.
		live := make([]bindingAt, 0, len(s.set))
		for _, o := range s.order {
			if at, ok := s.set[o.b]; ok && at.Equal(o.at) {
				live = append(live, o)
			}
		}
		s.order = live
	}
}

// take removes b and reports whether it was there and fresh.
func (s *bindings) take(b binding, now time.Time) bool {
	at, ok := s.set[b]
	if !ok {
		return false
	}
	delete(s.set, b)
	return now.Sub(at) <= bindingTTL
}

// Bind sends a binding to the peer process over the channel. The peer
// can take it (TakeBinding) as soon as Bind returned: a message on the
// channel's socket is queued at the peer when the send returns.
func (d *Device) Bind(b [BindingLen]byte) error {
	if err := d.deadErr(); err != nil {
		return err
	}
	v := bindingOf(b)
	return d.send(&msg{typ: msgBind, x: v.x, y: v.y}, -1)
}

// TakeBinding reports whether the peer process sent binding b over the
// channel (Bind) within the last minute, and removes it: each binding
// is taken once. It first handles the messages waiting on the socket.
func (d *Device) TakeBinding(b [BindingLen]byte) bool {
	v := bindingOf(b)
	d.mu.Lock()
	ok := d.binds.take(v, time.Now())
	d.mu.Unlock()
	if ok {
		return true
	}
	if err := d.sync(); err != nil {
		d.fail(err, false)
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.binds.take(v, time.Now())
}
