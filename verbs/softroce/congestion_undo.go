package softroce

// Undoing reductions that spurious resends caused (duplicate echoes,
// dupecho_qp.go), as Linux's TCP undoes a recovery that DSACKs prove
// needless (RFC 3708's detection, RFC 4015's response). Each reduction
// of the window for loss (a lossy round's, a timeout's) remembers the
// resends behind it: those of its round, and those of the round after
// it, whose losses answer for the same congestion. Each resend the peer
// reports receiving twice uncounts one of the reduction whose span holds
// it; once none is left, no packet behind the reduction was lost (the
// path reordered, or reports came late), and the reduction is taken
// back: the window grows by the factor it shrank by, and the slow-start
// threshold and CUBIC's curve return to what they were. Reductions made
// since (for delay, for later losses) stay. One resend never reported
// twice (a real loss) keeps a reduction.
//
// Without this, every spurious resend at a queue cost the window half (or
// CUBIC's 0.3) and a TCP flow's share its whole recovery: at a 1 Gbit/s
// bottleneck between namespaces on a two-CPU host, whose veths reorder
// packets by milliseconds while the CPUs are saturated, all of rsock's
// losses were spurious.

// maxCuts is how many of the latest reductions for loss can still be
// undone: the duplicate echoes of a reduction's resends come a round trip
// after them, a few reductions later at most.
const maxCuts = 4

// lossCut is one reduction of the window for loss.
type lossCut struct {
	from, to    int64 // the span of the resends behind it (ns, both included); to 0 while the next round's still count
	retrans     int   // its resends not yet reported as duplicates
	cwnd, after int   // the window before and after it
	ssthresh    int   // the slow-start threshold before
	cubic       cubic // CUBIC's curve before
	undoable    bool  // in use, and not yet undone
}

// saveCut is the state a reduction about to be made may have to return
// to.
func (c *delayGated) saveCut() lossCut {
	return lossCut{cwnd: c.cwnd, ssthresh: c.ssthresh, cubic: c.cubic}
}

// recordCut records the reduction just made from the state before, for
// the round's resends (or, after a timeout, those to come).
func (c *delayGated) recordCut(before lossCut) {
	if c.cwnd >= before.cwnd {
		return // nothing was taken
	}
	before.after = c.cwnd
	before.from, before.to = c.roundStart, 0
	before.retrans = c.roundLost
	before.undoable = true
	c.cutSeq++
	c.cuts[c.cutSeq%maxCuts] = before
}

// countCutResends counts n resends toward the latest reduction while its
// span is open.
func (c *delayGated) countCutResends(n int) {
	if k := &c.cuts[c.cutSeq%maxCuts]; k.undoable && k.to == 0 {
		k.retrans += n
	}
}

// sealCut ends the span of the latest reduction with the round that
// answered for it.
func (c *delayGated) sealCut() {
	if k := &c.cuts[c.cutSeq%maxCuts]; k.undoable && k.to == 0 {
		k.to = max(c.now, k.from+1)
	}
}

func (c *delayGated) OnSpuriousResends(n int, resentAt int64) bool {
	if n <= 0 || resentAt <= 0 {
		return false
	}
	if resentAt >= c.roundStart {
		// Resends of this round that arrived twice are no loss of it.
		c.roundLost = max(c.roundLost-n, 0)
	}
	for seq := c.cutSeq; seq > 0 && seq > c.cutSeq-maxCuts; seq-- {
		k := &c.cuts[seq%maxCuts]
		if !k.undoable || resentAt < k.from || (k.to != 0 && resentAt > k.to) {
			continue
		}
		if k.retrans -= n; k.retrans > 0 {
			return false
		}
		k.undoable = false
		// The window grows back by the factor the reduction took.
		c.cwnd = min(max(c.cwnd*k.cwnd/k.after, c.cwnd), c.max)
		c.ssthresh = max(c.ssthresh, k.ssthresh)
		if seq == c.cutSeq {
			// The latest reduction: CUBIC's curve and the recovery round
			// it began go with it.
			c.cubic = k.cubic
			c.hold = 0
		}
		c.acked = 0
		c.setPacing()
		return true
	}
	return false
}
