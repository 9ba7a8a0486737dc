package netlab

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Impairment says what the relay does to the frames of one direction.
// Each frame is, at random and independently, held back (Reorder),
// sent twice (Duplicate), or forwarded as it is; Reorder+Duplicate must not
// exceed 1.
type Impairment struct {
	// Duplicate is the fraction of frames sent twice, back to back.
	Duplicate float64
	// Reorder is the fraction of frames held back and sent after later
	// ones: a held frame goes out once ReorderDepth frames that arrived
	// after it have been sent, or after ReorderHold if fewer come.
	Reorder float64
	// ReorderDepth is how many later frames pass a held frame; default 3.
	ReorderDepth int
	// ReorderHold bounds how long a frame is held; default 2 ms.
	ReorderHold time.Duration
	// Seed seeds the choices (with the direction), so a run can be
	// repeated.
	Seed uint64
}

// Check reports an impairment that cannot be applied.
func (imp Impairment) Check() error {
	if imp.Duplicate < 0 || imp.Reorder < 0 || imp.Duplicate+imp.Reorder > 1 {
		return fmt.Errorf("netlab: duplicate %v and reorder %v: want fractions in [0, 1] adding up to at most 1", imp.Duplicate, imp.Reorder)
	}
	if imp.ReorderDepth < 0 || imp.ReorderHold < 0 {
		return fmt.Errorf("netlab: reorder depth %d and hold %v must not be negative", imp.ReorderDepth, imp.ReorderHold)
	}
	return nil
}

// RelayStats counts what one direction of a relay did.
type RelayStats struct {
	// Frames is the number of frames received.
	Frames uint64 `json:"frames"`
	// Sent is the number of frames sent, duplicates included.
	Sent uint64 `json:"sent"`
	// Duplicated is the number of frames sent twice.
	Duplicated uint64 `json:"duplicated"`
	// Held is the number of frames held back for reordering.
	Held uint64 `json:"held"`
	// Reordered is the number of held frames that went out after at least
	// one frame that arrived after them: the frames actually reordered.
	Reordered uint64 `json:"reordered"`
	// SendErrors is the number of frames the relay failed to send.
	SendErrors uint64 `json:"send_errors"`
	// KernelDrops is the number of frames the relay's socket dropped for
	// want of buffer space (PACKET_STATISTICS): loss the relay added.
	KernelDrops uint64 `json:"kernel_drops"`
}

// RelayReport is what a relay says when it ends: each direction's counts.
type RelayReport struct {
	AToB RelayStats `json:"a_to_b"`
	BToA RelayStats `json:"b_to_a"`
}

// heldFrame is a frame held back for reordering.
type heldFrame struct {
	buf    []byte
	passed int       // later frames sent since it was held
	until  time.Time // release it by then at the latest
}

// impairer applies an Impairment to the frames of one direction. It is
// the relay's logic without sockets: frame and expire hand frames to send
// in the order they must go out.
type impairer struct {
	imp   Impairment
	rng   *rand.Rand
	held  []heldFrame
	free  [][]byte // buffers of released frames, for reuse
	stats RelayStats
}

func newImpairer(imp Impairment, direction uint64) *impairer {
	if imp.ReorderDepth == 0 {
		imp.ReorderDepth = 3
	}
	if imp.ReorderHold == 0 {
		imp.ReorderHold = 2 * time.Millisecond
	}
	return &impairer{imp: imp, rng: rand.New(rand.NewPCG(imp.Seed, direction))}
}

// frame takes a received frame (b is reused by the caller afterwards) and
// sends what is due: the frame itself unless it is held, then any held
// frames it released.
func (m *impairer) frame(b []byte, now time.Time, send func([]byte) error) {
	m.stats.Frames++
	r := m.rng.Float64()
	switch {
	case r < m.imp.Reorder:
		var buf []byte
		if n := len(m.free); n > 0 {
			buf, m.free = m.free[n-1][:0], m.free[:n-1]
		}
		m.held = append(m.held, heldFrame{buf: append(buf, b...), until: now.Add(m.imp.ReorderHold)})
		m.stats.Held++
		return
	case r < m.imp.Reorder+m.imp.Duplicate:
		m.send(b, send)
		m.send(b, send)
		m.stats.Duplicated++
	default:
		m.send(b, send)
	}
	// The frame just sent has passed every held frame.
	for i := range m.held {
		m.held[i].passed++
	}
	m.release(now, send)
}

// expire sends the held frames whose time is up.
func (m *impairer) expire(now time.Time, send func([]byte) error) { m.release(now, send) }

// release sends, oldest first, the held frames that enough later frames
// have passed or whose hold time is over.
func (m *impairer) release(now time.Time, send func([]byte) error) {
	kept := m.held[:0]
	for _, h := range m.held {
		if h.passed < m.imp.ReorderDepth && now.Before(h.until) {
			kept = append(kept, h)
			continue
		}
		m.send(h.buf, send)
		if h.passed > 0 {
			m.stats.Reordered++
		}
		m.free = append(m.free, h.buf)
	}
	clear(m.held[len(kept):])
	m.held = kept
}

// flush sends every held frame (at the end of a run).
func (m *impairer) flush(send func([]byte) error) {
	for _, h := range m.held {
		m.send(h.buf, send)
		if h.passed > 0 {
			m.stats.Reordered++
		}
	}
	m.held = m.held[:0]
}

// nextDeadline is when the oldest held frame must go out; ok false when
// none is held.
func (m *impairer) nextDeadline() (t time.Time, ok bool) {
	for _, h := range m.held {
		if !ok || h.until.Before(t) {
			t, ok = h.until, true
		}
	}
	return t, ok
}

func (m *impairer) send(b []byte, send func([]byte) error) {
	if err := send(b); err != nil {
		m.stats.SendErrors++
		return
	}
	m.stats.Sent++
}
