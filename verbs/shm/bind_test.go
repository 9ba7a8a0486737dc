//go:build linux

package shm

import (
	"testing"
	"time"
)

// TestBindings: a binding is taken once, only within bindingTTL, and a
// peer that floods the channel with bindings holds at most maxBindings
// of them (the oldest go first).
func TestBindings(t *testing.T) {
	var s bindings
	now := time.Unix(1000, 0)
	s.add(binding{1, 1}, now)
	if s.take(binding{1, 2}, now) {
		t.Fatal("took a binding never sent")
	}
	if !s.take(binding{1, 1}, now) {
		t.Fatal("did not take a binding sent")
	}
	if s.take(binding{1, 1}, now) {
		t.Fatal("took a binding twice")
	}
	s.add(binding{2, 2}, now)
	if s.take(binding{2, 2}, now.Add(bindingTTL+time.Second)) {
		t.Fatal("took a stale binding")
	}
	for i := range 3 * maxBindings {
		s.add(binding{3, uint64(i)}, now.Add(time.Duration(i)))
	}
	if len(s.set) > maxBindings || len(s.order) > 4*maxBindings+1 {
		t.Fatalf("%d bindings kept (%d in order), at most %d", len(s.set), len(s.order), maxBindings)
	}
	late := now.Add(3 * maxBindings)
	if s.take(binding{3, 0}, late) {
		t.Fatal("the oldest binding of a flood survived")
	}
	if !s.take(binding{3, 3*maxBindings - 1}, late) {
		t.Fatal("the newest binding of a flood is gone")
	}
	// Expired ones go as new ones come.
	s.add(binding{4, 4}, late.Add(2*bindingTTL))
	if len(s.set) != 1 {
		t.Fatalf("%d bindings kept after all others expired", len(s.set))
	}
}

// TestBindOverChannel: a binding sent with Bind is taken at the other end
// of the channel, once, as soon as Bind returned; not at the sender's.
func TestBindOverChannel(t *testing.T) {
	da, db := newPair(t)
	b := [BindingLen]byte{1, 2, 3}
	must(t, da.Bind(b))
	if da.TakeBinding(b) {
		t.Fatal("the sender took its own binding")
	}
	if !db.TakeBinding(b) {
		t.Fatal("the peer did not get the binding")
	}
	if db.TakeBinding(b) {
		t.Fatal("taken twice")
	}
}
