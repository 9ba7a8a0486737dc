//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
)

// victimPair connects a node on device a (the victim) to a node on device
// b (the attacker, which also writes into a's arena by hand).
func victimPair(t *testing.T) (a, b *node) {
	t.Helper()
	da, db := newPair(t)
	a, b = newNode(t, da, 1<<16, allAccess), newNode(t, db, 1<<16, allAccess)
	connect(t, a, b, allAccess)
	return a, b
}

// attackerView is the victim QP's inbound ring as the attacker maps it.
func attackerView(a, b *node) []byte {
	p := b.dev.peerQP(a.qp.QPN())
	return p.slot
}

// expectViolation waits for the victim's receive to be flushed and checks
// that the QP and the channel failed with ErrViolation, the attacker's
// channel ended, and nothing panicked.
func expectViolation(t *testing.T, a, b *node) {
	t.Helper()
	wc := verbstest.WaitWC(t, a.rcq, wcTimeout)
	if wc.Status == verbs.WCSuccess {
		t.Fatalf("garbage completed as %v", wc)
	}
	if err := a.dev.Err(); !errors.Is(err, ErrViolation) {
		t.Fatalf("victim channel: %v, want ErrViolation", err)
	}
	if cause := a.qp.(verbs.Causer).Cause(); !errors.Is(cause, ErrViolation) {
		t.Fatalf("victim QP cause: %v", cause)
	}
	select {
	case <-b.dev.Done():
	case <-time.After(wcTimeout):
		t.Fatal("the attacker's end of the channel is still open")
	}
}

// TestGarbageInRing: the peer writes garbage into a queue pair's inbound
// ring (its producer index, entries, lengths, flags); the victim fails
// the channel with ErrViolation instead of reading out of bounds,
// panicking or completing garbage.
func TestGarbageInRing(t *testing.T) {
	cases := map[string]func(slot []byte){
		"prod far ahead": func(s []byte) { u64(s, offProd).Store(ringEntries + 1) },
		"prod behind":    func(s []byte) { u64(s, offProd).Store(^uint64(0)) },
		"bad opcode": func(s []byte) {
			writeEntry(s, 0, entry{op: 99, len: 1})
			u64(s, offProd).Store(1)
		},
		"inline send too long": func(s []byte) {
			writeEntry(s, 0, entry{op: entSend, len: dataSize * 4})
			u64(s, offProd).Store(1)
		},
		"out-of-line send without memfd": func(s []byte) {
			writeEntry(s, 0, entry{op: entSend, flags: entFlagOOL, len: 1 << 20})
			u64(s, offProd).Store(1)
		},
		"unknown flags": func(s []byte) {
			writeEntry(s, 0, entry{op: entSend, flags: 0x80, len: 8})
			u64(s, offProd).Store(1)
		},
		"write_imm over 2 GiB": func(s []byte) {
			writeEntry(s, 0, entry{op: entWriteImm, len: 1<<31 + 1})
			u64(s, offProd).Store(1)
		},
	}
	for name, attack := range cases {
		t.Run(name, func(t *testing.T) {
			a, b := victimPair(t)
			a.vt().PostRecv(t, 1, 0, 1024)
			attack(attackerView(a, b))
			expectViolation(t, a, b)
		})
	}
}

// TestGarbageCursors: the peer writes garbage into the consumer cursors
// the victim reads when it sends; its send fails the channel.
func TestGarbageCursors(t *testing.T) {
	cases := map[string]func(slot []byte){
		"cons beyond prod":       func(s []byte) { u64(s, offCons).Store(5) },
		"consData beyond head":   func(s []byte) { u64(s, offConsData).Store(1 << 40) },
		"cons far behind (wrap)": func(s []byte) { u64(s, offCons).Store(^uint64(0) - 3) },
		"consData far behind":    func(s []byte) { u64(s, offConsData).Store(^uint64(0) - 3) },
	}
	for name, attack := range cases {
		t.Run(name, func(t *testing.T) {
			a, b := victimPair(t)
			a.vt().PostRecv(t, 1, 0, 1024)
			// b's own slot, which the victim reads as the consumer's.
			attack(b.dev.arena[slotsOffset(b.dev.maxQPs)+b.qp.(*QP).slotIdx*slotSize:])
			a.vt().PostSend(t, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.vt().SGE(0, 8)}})
			expectViolation(t, a, b)
		})
	}
}

// TestGarbageFlags: garbage in the words that only trigger wake-ups (the
// sleeping flags and txBlocked) costs spurious wake-ups, nothing else.
func TestGarbageFlags(t *testing.T) {
	a, b := victimPair(t)
	for i := range b.dev.maxQPs {
		u32(b.dev.peerMem, cqTableOff+i*cqWordSize).Store(0xffffffff)
	}
	u32(attackerView(a, b), offTxBlocked).Store(0xdeadbeef)
	for i := range 10 {
		b.vt().PostRecv(t, uint64(i), 0, 64)
		a.vt().PostSend(t, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{a.vt().SGE(0, 8)}})
		verbstest.ExpectWC(t, a.scq, uint64(i), verbs.WCSend, verbs.WCSuccess, wcTimeout)
		verbstest.ExpectWC(t, b.rcq, uint64(i), verbs.WCRecv, verbs.WCSuccess, wcTimeout)
	}
	if err := a.dev.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestGarbageWakes: the peer writes garbage into the words of the
// victim's arena that only cause wake-ups (the wake summary, the rest of
// the header page, the wake bitmap with marks for CQs never created,
// closed or beyond the arena's, the bell word) and rings the victim's
// doorbell without cause, over and over, while the victim sleeps and
// traffic flows: spurious wake-ups only; no panic, no hang, and the
// channel keeps working.
func TestGarbageWakes(t *testing.T) {
	a, b := victimPair(t)
	closed, err := a.dev.CreateCQ(16) // an index that was in use
	must(t, err)
	must(t, closed.Close())
	arena := b.dev.peerMem // the victim's arena as the attacker maps it
	stop := make(chan struct{})
	attacks := make(chan int, 1)
	go func() {
		n := 0
		defer func() { attacks <- n }()
		for ; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			for off := offWakeSum; off < pageSize; off += 8 {
				u64(arena, off).Store(^uint64(0))
			}
			for off := wakeOffset(a.dev.maxQPs); off < slotsOffset(a.dev.maxQPs); off += 8 {
				u64(arena, off).Store(^uint64(0))
			}
			u64(arena, offBell).Store(uint64(n) * 0x9e3779b97f4a7c15)
			ring(b.dev.peerBell.fd)
			time.Sleep(10 * time.Microsecond)
		}
	}()
	for i := range 20 {
		id := uint64(i)
		a.vt().PostRecv(t, id, 0, 64)
		res := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), wcTimeout)
			defer cancel()
			res <- a.rcq.Wait(ctx)
		}()
		time.Sleep(time.Millisecond) // the waiter sleeps, and is woken for nothing
		b.vt().PostSend(t, verbs.SendWR{ID: id, Opcode: verbs.WRSend, SGL: []verbs.SGE{b.vt().SGE(0, 8)}})
		verbstest.ExpectWC(t, b.scq, id, verbs.WCSend, verbs.WCSuccess, wcTimeout)
		must(t, <-res)
		verbstest.ExpectWC(t, a.rcq, id, verbs.WCRecv, verbs.WCSuccess, wcTimeout)
	}
	close(stop)
	t.Logf("%d rounds of garbage and rings", <-attacks)
	if err := a.dev.Err(); err != nil {
		t.Fatalf("the victim's channel failed: %v", err)
	}
}

// FuzzInboundRing writes fuzzed bytes over a queue pair's ring header,
// entries and data (as a hostile peer could) and polls: whatever the
// bytes, the victim completes only receives it has posted, or fails the
// channel with ErrViolation; it never panics or hangs.
func FuzzInboundRing(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0}, []byte{entSend, 0, 0, 0, 1, 2, 3, 4, 8, 0, 0, 0})
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0}, []byte{entWriteImm, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, []byte{})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0}, []byte{entSendImm, entFlagOOL, 0, 0, 9, 9, 9, 9, 0, 0, 0x10, 0})
	f.Fuzz(func(t *testing.T, prod, ring []byte) {
		a, b := victimPair(t)
		for i := range 4 {
			a.vt().PostRecv(t, uint64(i), i*1024, 1024)
		}
		s := attackerView(a, b)
		copy(s[offEntries:offData], ring)
		copy(s[offData:], ring)
		var p [8]byte
		copy(p[:], prod)
		u64(s, offProd).Store(binary.LittleEndian.Uint64(p[:]))
		var wcs [8]verbs.WC
		n, _ := a.rcq.Poll(wcs[:])
		for _, wc := range wcs[:n] {
			if wc.WRID > 3 {
				t.Fatalf("completion of a receive never posted: %v", wc)
			}
		}
		if err := a.dev.Err(); err != nil && !errors.Is(err, ErrViolation) {
			t.Fatalf("channel failed with %v", err)
		}
	})
}

// FuzzDecodeMsg: any datagram decodes to a message of a known type with
// the right descriptor count, or to an error.
func FuzzDecodeMsg(f *testing.F) {
	var b [msgLen]byte
	f.Add((&msg{typ: msgQPNew, a: 0x10001, b: 1}).encode(&b), 0)
	f.Add((&msg{typ: msgMRNew, a: 7, x: 4096, y: 4096}).encode(&b), 1)
	f.Add([]byte{msgHello}, 1)
	f.Add((&msg{typ: msgBind, x: 1, y: 2}).encode(&b), 0)
	f.Fuzz(func(t *testing.T, p []byte, nfd int) {
		m, err := decodeMsg(p, nfd)
		if err != nil {
			return
		}
		if m.typ == 0 || m.typ > msgMax || wantsFD(m.typ) != (nfd == 1) || len(p) != msgLen {
			t.Fatalf("accepted %x with %d descriptors as %+v", p, nfd, m)
		}
		var again [msgLen]byte
		if string(m.encode(&again)) != string(p) {
			t.Fatalf("%x decodes to %+v, which encodes differently", p, m)
		}
	})
}

// rawPeer is a hand-driven peer: it speaks the channel protocol through
// a socket, message by message.
type rawPeer struct {
	fd    int
	arena []byte
}

// openVictim opens a device whose peer is driven by hand and sends it the
// hello and the doorbell message given, returning the Open result.
func openVictim(t *testing.T, hello func(p *rawPeer) (msg, int), bell func(t *testing.T) (msg, int)) (*Device, *rawPeer, error) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	must(t, err)
	f := os.NewFile(uintptr(fds[0]), "victim")
	c, err := net.FileConn(f)
	f.Close()
	must(t, err)
	p := &rawPeer{fd: fds[1]}
	t.Cleanup(func() {
		unix.Close(p.fd)
		if p.arena != nil {
			unix.Munmap(p.arena)
		}
	})
	type res struct {
		d   *Device
		err error
	}
	ch := make(chan res, 1)
	go func() {
		d, err := Open(c.(*net.UnixConn), Config{MaxQPs: 8})
		ch <- res{d, err}
	}()
	m, fd := hello(p)
	p.send(t, m, fd)
	if fd >= 0 {
		unix.Close(fd)
	}
	m, fd = bell(t)
	var b [msgLen]byte
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
		defer unix.Close(fd)
	}
	unix.Sendmsg(p.fd, m.encode(&b), oob, nil, 0) // fails if the victim refused the hello
	r := <-ch
	if r.d != nil {
		t.Cleanup(func() { r.d.Close() })
	}
	return r.d, p, r.err
}

// validHello makes an arena like a real peer's.
func validHello(t *testing.T) func(p *rawPeer) (msg, int) {
	return func(p *rawPeer) (msg, int) {
		size := arenaSize(8)
		fd, err := newMemfd("rsock-shm-test", size, nil)
		must(t, err)
		p.arena, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		must(t, err)
		return msg{typ: msgHello, a: arenaVersion, b: 8, x: uint64(size)}, fd
	}
}

// validBell is a doorbell like a real peer's.
func validBell(t *testing.T) (msg, int) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	must(t, err)
	return msg{typ: msgBell}, fd
}

func (p *rawPeer) send(t *testing.T, m msg, fd int) {
	t.Helper()
	var b [msgLen]byte
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	must(t, unix.Sendmsg(p.fd, m.encode(&b), oob, nil, 0))
}

// TestHandWrittenMessages sends the victim control messages a hostile
// peer could write; each ends the channel with ErrViolation, and every
// descriptor that came with it is closed.
func TestHandWrittenMessages(t *testing.T) {
	memfd := func(t *testing.T, sealed bool) int {
		fd, err := unix.MemfdCreate("rsock-shm-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		must(t, err)
		must(t, unix.Ftruncate(fd, 1<<16))
		if sealed {
			_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals)
			must(t, err)
		}
		return fd
	}
	pipe := func(t *testing.T) int {
		var p [2]int
		must(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
		unix.Close(p[1])
		return p[0]
	}
	efd := func(t *testing.T) int {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		must(t, err)
		return fd
	}
	cases := map[string]func(t *testing.T) (msg, int){
		"unknown type":             func(*testing.T) (msg, int) { return msg{typ: 42}, -1 },
		"region in unsealed memfd": func(t *testing.T) (msg, int) { return msg{typ: msgMRNew, a: 1, x: 4096, y: 4096}, memfd(t, false) },
		"region in a pipe":         func(t *testing.T) (msg, int) { return msg{typ: msgMRNew, a: 1, x: 4096, y: 4096}, pipe(t) },
		"region past its memfd":    func(t *testing.T) (msg, int) { return msg{typ: msgMRNew, a: 1, x: 4096, y: 1 << 20}, memfd(t, true) },
		"region without memfd":     func(*testing.T) (msg, int) { return msg{typ: msgMRNew, a: 1, x: 4096, y: 4096}, -1 },
		"second doorbell":          func(t *testing.T) (msg, int) { return msg{typ: msgBell}, efd(t) },
		"queue pair out of range":  func(*testing.T) (msg, int) { return msg{typ: msgQPNew, a: 9, b: 9}, -1 },
		"recv CQ out of range":     func(*testing.T) (msg, int) { return msg{typ: msgQPNew, a: 0x10001, b: 1, c: 8}, -1 },
		"send CQ out of range":     func(*testing.T) (msg, int) { return msg{typ: msgQPNew, a: 0x10001, b: 1, d: 1 << 31}, -1 },
		"out-of-line to nobody":    func(t *testing.T) (msg, int) { return msg{typ: msgOOL, a: 5, b: 8192}, memfd(t, true) },
		"acknowledge nothing":      func(*testing.T) (msg, int) { return msg{typ: msgQPAck, a: 5}, -1 },
		"second hello":             func(t *testing.T) (msg, int) { return msg{typ: msgHello, a: 1}, memfd(t, true) },
		"binding with a memfd":     func(t *testing.T) (msg, int) { return msg{typ: msgBind, x: 1}, memfd(t, true) },
	}
	for name, attack := range cases {
		t.Run(name, func(t *testing.T) {
			baseline := shmHeld(t)
			d, p, err := openVictim(t, validHello(t), validBell)
			must(t, err)
			m, fd := attack(t)
			p.send(t, m, fd)
			if fd >= 0 {
				unix.Close(fd)
			}
			select {
			case <-d.Done():
			case <-time.After(wcTimeout):
				t.Fatal("the channel survived")
			}
			if err := d.Err(); !errors.Is(err, ErrViolation) {
				t.Fatalf("channel ended with %v, want ErrViolation", err)
			}
			must(t, d.Close())
			if r := shmResidue(t, baseline); len(r) > 1 { // the test's own arena mapping
				t.Fatalf("left behind: %q", r)
			}
		})
	}
}

// TestBadHello: a peer whose hello is wrong, whose arena is not a sealed
// memfd of the size it claims, or whose doorbell is not an eventfd, is
// refused by Open, and nothing of it is left.
func TestBadHello(t *testing.T) {
	size := arenaSize(8)
	cases := map[string]func(t *testing.T) (msg, int){
		"version": func(t *testing.T) (msg, int) {
			fd, _ := newMemfd("rsock-shm-test", size, nil)
			return msg{typ: msgHello, a: 99, b: 8, x: uint64(size)}, fd
		},
		"size claims more than the arena": func(t *testing.T) (msg, int) {
			fd, _ := newMemfd("rsock-shm-test", size, nil)
			return msg{typ: msgHello, a: arenaVersion, b: 9, x: uint64(arenaSize(9))}, fd
		},
		"unsealed arena": func(t *testing.T) (msg, int) {
			fd, _ := unix.MemfdCreate("rsock-shm-test", unix.MFD_CLOEXEC)
			unix.Ftruncate(fd, int64(size))
			return msg{typ: msgHello, a: arenaVersion, b: 8, x: uint64(size)}, fd
		},
		"not a hello": func(t *testing.T) (msg, int) { return msg{typ: msgQPAck, a: 1}, -1 },
	}
	bells := map[string]func(t *testing.T) (msg, int){
		"doorbell is a memfd": func(t *testing.T) (msg, int) {
			fd, _ := newMemfd("rsock-shm-test", size, nil)
			return msg{typ: msgBell}, fd
		},
		"doorbell is a pipe": func(t *testing.T) (msg, int) {
			var p [2]int
			must(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
			unix.Close(p[1])
			return msg{typ: msgBell}, p[0]
		},
		"no doorbell": func(t *testing.T) (msg, int) { return msg{typ: msgQPAck, a: 1}, -1 },
	}
	run := func(name string, hello func(p *rawPeer) (msg, int), bell func(t *testing.T) (msg, int)) {
		t.Run(name, func(t *testing.T) {
			baseline := shmHeld(t)
			_, p, err := openVictim(t, hello, bell)
			if !errors.Is(err, ErrViolation) {
				t.Fatalf("Open: %v", err)
			}
			t.Logf("refused: %v", err)
			own := 0
			if p.arena != nil {
				own = 1 // the test's own arena mapping
			}
			if r := shmResidue(t, baseline); len(r) > own {
				t.Fatalf("left behind: %q", r)
			}
		})
	}
	for name, hello := range cases {
		run(name, func(*rawPeer) (msg, int) { return hello(t) }, validBell)
	}
	for name, bell := range bells {
		run(name, validHello(t), bell)
	}
}

// TestCheckPeer: the CheckPeer hook sees the peer's credentials and its
// refusal fails Open.
func TestCheckPeer(t *testing.T) {
	refuse := errors.New("not the TCP peer")
	var saw unix.Ucred
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fds[1])
	f := os.NewFile(uintptr(fds[0]), "x")
	c, err := net.FileConn(f)
	f.Close()
	must(t, err)
	_, err = Open(c.(*net.UnixConn), Config{CheckPeer: func(cr *unix.Ucred) error { saw = *cr; return refuse }})
	if !errors.Is(err, refuse) || int(saw.Pid) != os.Getpid() {
		t.Fatalf("Open: %v, saw %+v", err, saw)
	}
}

var _ = context.Background
var _ = rand.New
