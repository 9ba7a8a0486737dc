package softroce

import (
	"encoding/binary"
	"math/bits"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Selective repeat, IRN style (SIGCOMM'18), between peers that negotiated
// it: the responder places request packets that arrive past a gap, keeps a
// bitmap of them, and answers with selective NAKs that say which PSNs
// arrived; the requester resends only the PSNs that are lost. Both halves
// are pure state here; the responder and completer drive them.

// sackWindow is how many PSNs past the expected one a responder tracks
// without wide SACK, and so twice the largest send window of a
// selective-repeat QP (see sackBytesFor for the wide one).
const sackWindow = 8 * wire.MaxSACKBytes

// reorderPackets is how many later transmissions must have arrived before
// a packet that has not is taken as lost (TCP's duplicate-ACK threshold,
// counted as RACK does, in transmission order rather than PSN order),
// until the path is seen to reorder more (maxReorderPackets).
const reorderPackets = 3

// maxReorderPackets bounds the packet threshold a reordering path raises
// it to (Linux's tcp_max_reordering is 300).
const maxReorderPackets = 256

// maxReorderMult bounds the reordering window, in quarters of the
// smoothed round trip: at most a whole round trip (RFC 8985, 6.2).
const maxReorderMult = 4

// reorderPersist is how many loss recoveries in a row without a spurious
// resend bring the reordering thresholds back to where they started
// (RFC 8985, 6.2: reo_wnd_persist). Reordering that a path showed once (a
// sender that moved between CPUs, a route that changed) does not slow
// every later loss's repair for the connection's life.
const reorderPersist = 16

// minReorderWindow is the least time by which a transmission that
// arrived must have followed one that has not for that one to be lost
// (RACK's reordering window, RFC 8985: a quarter of the smoothed round
// trip, but no less than this).
const minReorderWindow = int64(50 * time.Microsecond)

// recvBitmap is the responder's record of PSNs placed past the expected
// PSN. Bits are indexed by PSN modulo the window (a power of two, sized
// per QP by init), so a set bit is unambiguous while every PSN it may
// stand for lies in [epsn, epsn+window). The zero value holds nothing
// and records nothing until init.
type recvBitmap struct {
	bits bitset
	n    int // bits set
}

// init sizes the bitmap for window PSNs (a power of two, at least 64)
// and empties it.
func (b *recvBitmap) init(window int) {
	b.bits, b.n = make([]uint64, window/64), 0
}

// window is how many PSNs the bitmap tells apart; 0 before init.
func (b *recvBitmap) window() int { return 64 * len(b.bits) }

func (b *recvBitmap) index(psn uint32) uint32 { return psn & uint32(b.window()-1) }

func (b *recvBitmap) has(psn uint32) bool {
	if len(b.bits) == 0 {
		return false
	}
	return b.bits.has(b.index(psn))
}

// set records psn; it reports false if psn was recorded already.
func (b *recvBitmap) set(psn uint32) bool {
	if len(b.bits) == 0 || b.has(psn) {
		return false
	}
	b.bits.set(b.index(psn))
	b.n++
	return true
}

// take clears psn's bit and reports whether it was set.
func (b *recvBitmap) take(psn uint32) bool {
	if !b.has(psn) {
		return false
	}
	b.bits.unset(b.index(psn))
	b.n--
	return true
}

// empty reports whether no PSN past the expected one was placed.
func (b *recvBitmap) empty() bool { return b.n == 0 }

// clear forgets every PSN; the window stays.
func (b *recvBitmap) clear() {
	clear(b.bits)
	b.n = 0
}

// word returns the 64 bits of the ring that start at index i (modulo the
// window): bit j is index i+j.
func (b *recvBitmap) word(i uint32) uint64 {
	i = i & uint32(b.window()-1)
	w, sh := i/64, i%64
	x := b.bits[w] >> sh
	if sh != 0 {
		x |= b.bits[(int(w)+1)%len(b.bits)] << (64 - sh)
	}
	return x
}

// encode writes the SACK bitmap for epsn (bit i: epsn+1+i placed) into dst
// and returns its length: just long enough for the highest placed PSN, at
// most len(dst) (a multiple of 4). It works a 64-bit word at a time.
func (b *recvBitmap) encode(dst []byte, epsn uint32) int {
	if b.n == 0 || len(b.bits) == 0 {
		return 0
	}
	// Bit i of the SACK is ring index epsn+1+i, for i < window-1 (the
	// window's last bit would be epsn itself).
	start, nbits := epsn+1, b.window()-1
	last := -1
	for k := (nbits - 1) / 64; k >= 0 && last < 0; k-- {
		x := b.word(start + uint32(64*k))
		if rem := nbits - 64*k; rem < 64 {
			x &= 1<<rem - 1
		}
		if x != 0 {
			last = 64*k + 63 - bits.LeadingZeros64(x)
		}
	}
	if last < 0 {
		return 0
	}
	n := wire.SACKLenWithin(last+1, len(dst)&^3)
	for k := 0; 8*k < n; k++ {
		x := b.word(start + uint32(64*k))
		if rem := nbits - 64*k; rem < 64 {
			x &= 1<<rem - 1
		}
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], x)
		copy(dst[8*k:n], w[:])
	}
	return n
}

// scoreboard is the requester's view of which PSNs past the cumulative
// ACK the responder holds, and of when each PSN was last transmitted, in
// a count of transmissions and in time. A PSN is lost once a packet
// transmitted at least reorderPackets transmissions after it has arrived,
// or one transmitted more than a reordering window (a quarter of the
// smoothed round trip) after it: as RACK's (RFC 8985), those rules find
// first losses and lost retransmissions alike, tolerate reordering
// shorter than either, and the time rule also finds a lost packet that
// few others followed (the last of a burst, or a resend). Its ring covers
// size PSNs, at least the QP's largest send window.
//
// A report that a resent PSN arrived may describe its earlier copy: a
// report generated before the resend reached the responder. So a report
// about a resent PSN is credited to the resend only once a smoothed round
// trip has passed since it went out; an earlier one moves nothing, so that
// a stale report does not declare the resend, and everything sent just
// before it, lost again. Reports about PSNs sent once are always credible.
type scoreboard struct {
	maxSize int // the most PSNs grow may cover; 0: as allocated

	seq    []uint32 // by PSN modulo len: transmission count when last sent
	sentAt []int64  // by PSN modulo len: when last sent (ns)
	at     []int64  // by PSN modulo len: when last resent (ns); 0 if sent once
	bits   bitset   // by PSN modulo len: arrived past the cumulative ACK
	txSeq  uint32   // transmissions so far (modular)
	rack   uint32   // the latest transmission known to have arrived
	rackAt int64    // when the latest transmission known to have arrived was sent (ns); 0 for none
	reoWnd int64    // the reordering window (ns); 0 while no round trip is measured
	now    int64    // when the report at hand came in (ns)
	minRTT int64    // the least round trip measured (ns); 0 none

	// Reordering, learned from resends that proved spurious (the first
	// copy arrived after all): the packet threshold (reorderPackets at
	// first) and the window in quarters of the smoothed round trip (1 at
	// first) double and grow by one, at most once per round trip, as
	// Linux's TCP raises its reordering degree and RACK its reo_wnd_mult
	// on a DSACK (RFC 8985, 6.2). A veth between namespaces reorders
	// dozens of packets when a sender moves between CPUs; taking each for
	// lost cost a third of the goodput at a 400 Mbit/s bottleneck. They
	// return to the start after reorderPersist loss recoveries without a
	// spurious resend (lossRecovery).
	dupThresh uint32
	reoMult   int64
	reoAt     int64  // when the last spurious resend was found (ns)
	spurious  uint64 // resends found spurious
	spur      bitset // by PSN modulo len: the latest resend was found spurious
	sacked    int    // PSNs past the cumulative ACK that arrived
	high      uint32 // one past the highest PSN selectively acknowledged
	any       bool   // high is set
	recent    int64  // transmissions after this time are too recent for the report at hand

	// recoveries counts the loss recoveries since the thresholds last
	// rose (reorderPersist of them lower them again); recoveryAt is when
	// the latest began, so that one counts once per round trip.
	recoveries int
	recoveryAt int64
}

// newScoreboard covers size PSNs, a power of two no larger than the
// peer's SACK bitmap describes (scoreboardSize).
func newScoreboard(size int) *scoreboard {
	s := &scoreboard{dupThresh: reorderPackets, reoMult: 1}
	s.alloc(size)
	return s
}

// initialScoreboard is the most PSNs a scoreboard covers before the
// window needs more (growScoreboard): the 1024 of the narrow SACK
// bitmap, which a window under 512 packets never outgrows.
const initialScoreboard = 1024

// growScoreboard returns a scoreboard that covers min(size,
// initialScoreboard) PSNs and may grow to size as the PSNs in flight need
// (grow). A 2048-packet window's scoreboard holds 4096 PSNs, about 80
// KiB, and most connections never have 512 packets in flight.
func growScoreboard(size int) *scoreboard {
	s := newScoreboard(min(size, initialScoreboard))
	s.maxSize = size
	return s
}

// alloc gives the scoreboard size entries, all clear.
func (s *scoreboard) alloc(size int) {
	s.seq, s.sentAt, s.at = make([]uint32, size), make([]int64, size), make([]int64, size)
	s.bits, s.spur = make(bitset, (size+63)/64), make(bitset, (size+63)/64)
}

// size is how many PSNs the scoreboard covers: the PSNs in flight, from
// the oldest unacknowledged to the newest sent, must be fewer.
func (s *scoreboard) size() int { return len(s.seq) }

// grow doubles the PSNs the scoreboard covers, if it may (maxSize),
// keeping what it knows of the n PSNs in flight from first. It reports
// whether it grew.
func (s *scoreboard) grow(first uint32, n int) bool {
	if 2*len(s.seq) > s.maxSize {
		return false
	}
	old := *s
	s.alloc(2 * len(old.seq))
	for k := range uint32(n) {
		psn := psnAdd(first, k)
		i, j := old.index(psn), s.index(psn)
		s.seq[j], s.sentAt[j], s.at[j] = old.seq[i], old.sentAt[i], old.at[i]
		if old.bits.has(i) {
			s.bits.set(j)
		}
		if old.spur.has(i) {
			s.spur.set(j)
		}
	}
	return true
}

func (s *scoreboard) index(psn uint32) uint32 { return psn & uint32(len(s.seq)-1) }

func (s *scoreboard) isSacked(psn uint32) bool { return s.bits.has(s.index(psn)) }

func (s *scoreboard) setSacked(psn uint32, on bool) {
	i := s.index(psn)
	was := s.bits.has(i)
	switch {
	case on && !was:
		s.bits.set(i)
		s.sacked++
	case !on && was:
		s.bits.unset(i)
		s.sacked--
	}
}

// bitset is a set of indexes, a bit each.
type bitset []uint64

func (b bitset) has(i uint32) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bitset) set(i uint32)      { b[i/64] |= 1 << (i % 64) }
func (b bitset) unset(i uint32)    { b[i/64] &^= 1 << (i % 64) }

// later reports whether transmission a came after transmission b.
func later(a, b uint32) bool { return int32(a-b) > 0 }

// reportAt starts handling a report that came in at now; srtt is the
// smoothed round trip and minRTT the least (0 before the first sample).
func (s *scoreboard) reportAt(now, srtt, minRTT int64) {
	s.recent = now - srtt
	s.now, s.minRTT = now, minRTT
	s.reoWnd = 0
	if srtt > 0 {
		s.reoWnd = max(min(srtt*s.reoMult/4, srtt), minReorderWindow)
	}
}

// credible reports whether the report at hand can describe psn's latest
// transmission. One that can't, and says psn arrived sooner after its
// resend than any round trip ever took, describes the first copy: the
// resend was spurious, and the path reorders.
func (s *scoreboard) credible(psn uint32) bool {
	i := s.index(psn)
	at := s.at[i]
	if at == 0 || at <= s.recent {
		return true
	}
	if s.minRTT > 0 && s.now-at < s.minRTT {
		s.markSpurious(i)
	}
	return false
}

// spuriousResend records that the peer received psn twice (a duplicate
// echo said so): its latest resend was spurious, and the path reorders
// (or a report came late), unless the timing rule (credible) found so
// already. It returns when that resend went out, or 0 if psn was not
// resent.
func (s *scoreboard) spuriousResend(psn uint32) int64 {
	i := s.index(psn)
	at := s.at[i]
	if at == 0 {
		return 0
	}
	s.markSpurious(i)
	return at
}

// markSpurious records that the latest resend at index i was spurious,
// learning from it once (the timing rule and a duplicate echo may both
// find it).
func (s *scoreboard) markSpurious(i uint32) {
	if !s.spur.has(i) {
		s.spur.set(i)
		s.reordered()
	}
}

// reordered learns from a spurious resend: the path reorders more than
// the thresholds allow. Once per round trip, since one reordering event
// makes many resends spurious.
func (s *scoreboard) reordered() {
	s.spurious++
	s.recoveries = 0
	if s.withinRound(s.reoAt) {
		return
	}
	s.reoAt = s.now
	s.dupThresh = min(2*s.dupThresh, maxReorderPackets)
	s.reoMult = min(s.reoMult+1, maxReorderMult)
}

// withinRound reports whether at, a time set by an earlier report (0 for
// none), lies within a smoothed round trip before the report at hand.
func (s *scoreboard) withinRound(at int64) bool { return at != 0 && at > s.recent }

// lossRecovery counts a recovery: the report at hand found packets lost
// and they are being sent again. Losses within a round trip of the
// recovery's start belong to it. After reorderPersist recoveries with no
// spurious resend among them, the packet threshold and the reordering
// window return to reorderPackets and a quarter round trip.
func (s *scoreboard) lossRecovery() {
	if s.withinRound(s.recoveryAt) {
		return
	}
	s.recoveryAt = s.now
	if s.dupThresh == reorderPackets && s.reoMult == 1 {
		return
	}
	if s.recoveries++; s.recoveries >= reorderPersist {
		s.dupThresh, s.reoMult, s.recoveries = reorderPackets, 1, 0
	}
}

// arrived records that psn arrived, placed or not. One that arrived and
// was not placed (the responder places past a gap only what can be placed
// on its own) must be sent again, and so must everything unplaced that
// was sent before it: waiting for later arrivals to prove it lost could
// wait for a timeout when the window holds the later packets back.
func (s *scoreboard) arrived(psn uint32) {
	if !s.credible(psn) {
		return
	}
	if s.isSacked(psn) {
		s.noteArrived(psn)
		return
	}
	if r := s.seq[s.index(psn)] + s.dupThresh; later(r, s.rack) {
		s.rack = r
	}
}

func (s *scoreboard) noteArrived(psn uint32) {
	if !s.credible(psn) {
		return
	}
	i := s.index(psn)
	if q := s.seq[i]; later(q, s.rack) {
		s.rack = q
	}
	if s.at[i] == 0 {
		// Only a PSN sent once says when the packet that arrived was
		// sent: a report about a resent one, even a credible one, may
		// come from its first copy, and taking the resend's time would
		// declare everything sent between the two copies lost.
		s.rackAt = max(s.rackAt, s.sentAt[i])
	}
}

// sent records a transmission of psn at now; again says it was sent
// before.
func (s *scoreboard) sent(psn uint32, now int64, again bool) {
	s.setSacked(psn, false)
	s.txSeq++
	i := s.index(psn)
	s.seq[i], s.sentAt[i], s.at[i] = s.txSeq, max(now, 1), 0
	s.spur.unset(i)
	if again {
		s.at[i] = max(now, 1)
	}
}

// sack records that psn arrived past a gap.
func (s *scoreboard) sack(psn uint32) {
	if s.isSacked(psn) {
		return
	}
	s.setSacked(psn, true)
	s.noteArrived(psn)
	if !s.any || psnDiff(psn, s.high) >= 0 {
		s.high, s.any = psnAdd(psn, 1), true
	}
}

// acked records a cumulative ACK moving from the PSN after from up to and
// including to: those PSNs arrived, and leave the scoreboard.
func (s *scoreboard) acked(from, to uint32) {
	n := psnDiff(to, from)
	if n <= 0 {
		return
	}
	if size := int32(len(s.seq)); n > size {
		from, n = psnAdd(to, uint32(-size)&wire.PSNMask), size
	}
	for i := int32(1); i <= n; i++ {
		psn := psnAdd(from, uint32(i))
		s.noteArrived(psn)
		s.setSacked(psn, false)
	}
	if s.any && psnDiff(psnAdd(to, 1), s.high) >= 0 {
		s.any = false
	}
}

// lost reports whether psn, sent and not acknowledged, is to be resent.
func (s *scoreboard) lost(psn uint32) bool {
	if s.isSacked(psn) {
		return false
	}
	i := s.index(psn)
	return int32(s.rack-s.seq[i]) >= int32(s.dupThresh) ||
		s.reoWnd > 0 && s.rackAt-s.sentAt[i] > s.reoWnd
}

// timedOut makes every PSN sent so far and not known to have arrived
// count as lost: a local ACK timeout expired.
func (s *scoreboard) timedOut() { s.rack = s.txSeq + s.dupThresh }

// forget drops every report of a PSN that arrived past the cumulative
// ACK, so that those PSNs count as lost after the next timedOut: the
// reports may be wrong (forged, or from a responder that lost what it
// placed), and only the cumulative ACK is proof of arrival.
func (s *scoreboard) forget() {
	clear(s.bits)
	s.sacked = 0
	s.any = false
}
