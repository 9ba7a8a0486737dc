//go:build linux

package shm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
)

// childEnv makes the test binary a peer process (runChild) instead of
// running tests; its value is the role.
const childEnv = "RSOCK_SHM_TEST_CHILD"

const childBig = 1 << 20

// runChild is the peer process of the two-process tests. It opens a
// channel over the socket at fd 3, makes a QP with a 2 MiB buffer, prints
// "qpn addr rkey", reads the parent's QPN from stdin, connects, and echoes
// every message it receives (a SEND, or a WRITE_WITH_IMM into the second
// half of its buffer) back with a SEND of the bytes it holds, until the
// channel ends.
func runChild(role string) {
	fail := func(err error) {
		fmt.Println("child:", err)
		os.Exit(1)
	}
	f := os.NewFile(3, "channel")
	c, err := net.FileConn(f)
	if err != nil {
		fail(err)
	}
	f.Close()
	d, err := Open(c.(*net.UnixConn), Config{})
	if err != nil {
		fail(err)
	}
	pd, _ := d.AllocPD()
	scq, _ := d.CreateCQ(1024)
	rcq, _ := d.CreateCQ(1024)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: scq, RecvCQ: rcq, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		fail(err)
	}
	buf, _ := verbs.AllocBuffer(2 * childBig)
	mr, err := pd.RegMR(buf, allAccess)
	if err != nil {
		fail(err)
	}
	fmt.Println(qp.QPN(), mr.Addr(), mr.RKey())
	var peer uint32
	if _, err := fmt.Fscan(os.Stdin, &peer); err != nil {
		fail(err)
	}
	n := &node{dev: d, pd: pd, scq: scq, rcq: rcq, qp: qp, buf: buf, mr: mr}
	if err := connectOne(n, peer, allAccess); err != nil {
		fail(err)
	}
	recv := func() error {
		_, err := qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{{Addr: mr.Addr() + childBig, Length: childBig, LKey: mr.LKey()}}}})
		return err
	}
	if err := recv(); err != nil {
		fail(err)
	}
	fmt.Println("ready")
	wc := make([]verbs.WC, 1)
	for {
		if err := rcq.Wait(context.Background()); err != nil {
			fail(err)
		}
		if k, _ := rcq.Poll(wc); k == 0 {
			continue
		}
		if wc[0].Status != verbs.WCSuccess {
			os.Exit(3) // the channel ended
		}
		if err := recv(); err != nil {
			fail(err)
		}
		if role == "echo" {
			_, err := qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSendWithImm, Imm: wc[0].ByteLen, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{{Addr: mr.Addr() + childBig, Length: wc[0].ByteLen, LKey: mr.LKey()}}}})
			if err != nil {
				fail(err)
			}
			if err := scq.Wait(context.Background()); err != nil {
				fail(err)
			}
			scq.Poll(wc)
		}
	}
}

// connectOne moves n's QP to RTS aimed at the peer's QP.
func connectOne(n *node, peer uint32, access verbs.Access) error {
	if err := n.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: access},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return err
	}
	if err := n.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DGID: n.dev.Port().GIDs[0]},
		PathMTU: verbs.MTU4096, DestQPN: peer, MaxDestRdAtomic: 16, MinRNRTimer: 1},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer); err != nil {
		return err
	}
	return n.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic)
}

// child is a peer process with a connected QP.
type child struct {
	cmd        *exec.Cmd
	dev        *Device
	n          *node
	addr       uint64
	rkey       uint32
	stdin      io.WriteCloser
	out        *bufio.Reader
	exitWaited bool
}

// startChild starts a peer process in role and connects a QP to it.
func startChild(t *testing.T, role string) *child {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	must(t, err)
	mine, theirs := os.NewFile(uintptr(fds[0]), "channel"), os.NewFile(uintptr(fds[1]), "channel-child")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	must(t, err)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	theirs.Close()
	c := &child{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(func() {
		if !c.exitWaited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	fc, err := net.FileConn(mine)
	mine.Close()
	must(t, err)
	c.dev, err = Open(fc.(*net.UnixConn), Config{})
	must(t, err)
	t.Cleanup(func() { c.dev.Close() })
	line, err := c.out.ReadString('\n')
	must(t, err)
	var qpn uint32
	if _, err := fmt.Sscan(line, &qpn, &c.addr, &c.rkey); err != nil {
		t.Fatalf("child said %q: %v", line, err)
	}
	c.n = newNode(t, c.dev, 2*childBig, allAccess)
	fmt.Fprintln(stdin, c.n.qp.QPN())
	must(t, connectOne(c.n, qpn, allAccess))
	if line, err := c.out.ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("child said %q: %v", line, err)
	}
	return c
}

// TestTwoProcesses runs every operation against a peer process: SENDs
// and WRITE_WITH_IMMs that it echoes back, WRITEs and READs of its
// memory, and atomics on it, at sizes around the inline limit and 1 MiB.
func TestTwoProcesses(t *testing.T) {
	c := startChild(t, "echo")
	a := c.n.vt()
	r := rand.New(rand.NewPCG(1, 2))
	id := uint64(100)
	echo := func(t *testing.T, src []byte) {
		t.Helper()
		wc := verbstest.ExpectWC(t, a.RecvCQ, id, verbs.WCRecv, verbs.WCSuccess, wcTimeout)
		if wc.ByteLen != uint32(len(src)) || !bytes.Equal(a.Buf[childBig:childBig+len(src)], src) {
			t.Fatalf("echo of %d bytes: %v", len(src), wc)
		}
	}
	for _, size := range []int{0, 1, inlineMax - 1, inlineMax, inlineMax + 1, childBig} {
		src := a.Buf[:size]
		t.Run(fmt.Sprintf("send/%d", size), func(t *testing.T) {
			verbstest.FillRandom(r, src)
			id++
			a.PostRecv(t, id, childBig, childBig)
			a.PostSend(t, verbs.SendWR{ID: id, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.SGE(0, size)}})
			verbstest.ExpectWC(t, a.SendCQ, id, verbs.WCSend, verbs.WCSuccess, wcTimeout)
			echo(t, src)
		})
		t.Run(fmt.Sprintf("write_imm/%d", size), func(t *testing.T) {
			verbstest.FillRandom(r, src)
			id++
			a.PostRecv(t, id, childBig, childBig)
			a.PostSend(t, verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWriteWithImm, Imm: 7, SGL: []verbs.SGE{a.SGE(0, size)},
				RemoteAddr: c.addr + childBig, RKey: c.rkey})
			verbstest.ExpectWC(t, a.SendCQ, id, verbs.WCRDMAWrite, verbs.WCSuccess, wcTimeout)
			echo(t, src)
		})
		t.Run(fmt.Sprintf("write_read/%d", size), func(t *testing.T) {
			verbstest.FillRandom(r, src)
			id++
			a.PostSend(t, verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.SGE(0, size)}, RemoteAddr: c.addr, RKey: c.rkey})
			verbstest.ExpectWC(t, a.SendCQ, id, verbs.WCRDMAWrite, verbs.WCSuccess, wcTimeout)
			id++
			a.PostSend(t, verbs.SendWR{ID: id, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.SGE(childBig, size)}, RemoteAddr: c.addr, RKey: c.rkey})
			verbstest.ExpectWC(t, a.SendCQ, id, verbs.WCRDMARead, verbs.WCSuccess, wcTimeout)
			if !bytes.Equal(a.Buf[childBig:childBig+size], src) {
				t.Fatalf("read back %d bytes differ", size)
			}
		})
	}
	t.Run("atomics", func(t *testing.T) {
		binary.NativeEndian.PutUint64(a.Buf[0:], 1000)
		a.PostSend(t, verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.SGE(0, 8)}, RemoteAddr: c.addr + 64, RKey: c.rkey})
		verbstest.ExpectWC(t, a.SendCQ, 1, verbs.WCRDMAWrite, verbs.WCSuccess, wcTimeout)
		a.PostSend(t, verbs.SendWR{ID: 2, Opcode: verbs.WRAtomicFetchAdd, SGL: []verbs.SGE{a.SGE(8, 8)}, RemoteAddr: c.addr + 64, RKey: c.rkey, CompareAdd: 234})
		verbstest.ExpectWC(t, a.SendCQ, 2, verbs.WCFetchAdd, verbs.WCSuccess, wcTimeout)
		a.PostSend(t, verbs.SendWR{ID: 3, Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{a.SGE(16, 8)}, RemoteAddr: c.addr + 64, RKey: c.rkey, CompareAdd: 1234, Swap: 7})
		verbstest.ExpectWC(t, a.SendCQ, 3, verbs.WCCompSwap, verbs.WCSuccess, wcTimeout)
		a.PostSend(t, verbs.SendWR{ID: 4, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.SGE(24, 8)}, RemoteAddr: c.addr + 64, RKey: c.rkey})
		verbstest.ExpectWC(t, a.SendCQ, 4, verbs.WCRDMARead, verbs.WCSuccess, wcTimeout)
		w := func(off int) uint64 { return binary.NativeEndian.Uint64(a.Buf[off:]) }
		if w(8) != 1000 || w(16) != 1234 || w(24) != 7 {
			t.Fatalf("fetch_add %d, cmp_swap %d, memory %d; want 1000, 1234, 7", w(8), w(16), w(24))
		}
	})
}

// shmResidue lists what of the provider this process holds beyond
// baseline (an earlier result): mappings and descriptors of its memfds,
// and eventfds (the runtime's netpoller has one of its own).
func shmResidue(t *testing.T, baseline []string) []string {
	t.Helper()
	seen := map[string]int{}
	for _, b := range baseline {
		seen[b]++
	}
	var out []string
	for _, r := range shmHeld(t) {
		if seen[r] > 0 {
			seen[r]--
			continue
		}
		out = append(out, r)
	}
	return out
}

func shmHeld(t *testing.T) []string {
	t.Helper()
	var out []string
	maps, err := os.ReadFile("/proc/self/maps")
	must(t, err)
	for _, l := range strings.Split(string(maps), "\n") {
		if strings.Contains(l, "rsock-shm") {
			out = append(out, "map: "+l)
		}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		if strings.Contains(l, "rsock-shm") || strings.Contains(l, "eventfd") {
			out = append(out, "fd: "+l)
		}
	}
	return out
}

// TestPeerKilled: the peer process is killed with SIGKILL while this one
// waits for a completion; the wait ends within milliseconds with a
// flushed receive whose cause wraps ECONNRESET, and once the objects and
// the device are closed nothing of the channel is left (mapping,
// descriptor; goroutines are checked by goleak).
func TestPeerKilled(t *testing.T) {
	baseline := shmHeld(t)
	c := startChild(t, "echo")
	a := c.n.vt()
	a.PostRecv(t, 5, childBig, childBig)
	if len(shmResidue(t, baseline)) == 0 {
		t.Fatal("shmResidue sees nothing of a live channel: it cannot see what is left behind")
	}
	done := make(chan verbs.WC, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wcTimeout)
		defer cancel()
		var wc [1]verbs.WC
		for {
			if n, _ := a.RecvCQ.Poll(wc[:]); n == 1 {
				done <- wc[0]
				return
			}
			if err := a.RecvCQ.Wait(ctx); err != nil {
				done <- verbs.WC{Status: verbs.WCGeneralErr}
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond) // let the waiter sleep on its doorbell
	start := time.Now()
	must(t, c.cmd.Process.Signal(syscall.SIGKILL))
	wc := <-done
	took := time.Since(start)
	c.cmd.Wait()
	c.exitWaited = true
	if wc.Status != verbs.WCWRFlushErr || wc.WRID != 5 {
		t.Fatalf("after the kill: %v", wc)
	}
	cause := a.QP.(verbs.Causer).Cause()
	if !errors.Is(cause, syscall.ECONNRESET) || !errors.Is(cause, ErrPeerGone) {
		t.Fatalf("cause %v, want ErrPeerGone wrapping ECONNRESET", cause)
	}
	if took > 500*time.Millisecond {
		t.Errorf("the wait ended %v after the kill", took)
	}
	t.Logf("the wait ended %v after SIGKILL", took)
	// Posting now fails at once too.
	a.PostSend(t, verbs.SendWR{ID: 6, Opcode: verbs.WRSend})
	verbstest.ExpectWC(t, a.SendCQ, 6, verbs.WCSend, verbs.WCWRFlushErr, wcTimeout)
	c.n.close(t)
	c.n.close = func(testing.TB) {}
	must(t, c.dev.Close())
	if r := shmResidue(t, baseline); len(r) != 0 {
		t.Fatalf("left behind: %q", r)
	}
}

// TestPeerStopped: with the peer process stopped (SIGSTOP), a wait with a
// deadline still ends at the deadline, and the channel works again once
// the peer continues.
func TestPeerStopped(t *testing.T) {
	c := startChild(t, "echo")
	a := c.n.vt()
	must(t, c.cmd.Process.Signal(syscall.SIGSTOP))
	waitStopped(t, c.cmd.Process.Pid)
	a.PostRecv(t, 7, childBig, childBig)
	a.PostSend(t, verbs.SendWR{ID: 7, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.SGE(0, 100)}})
	verbstest.ExpectWC(t, a.SendCQ, 7, verbs.WCSend, verbs.WCSuccess, wcTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	err := a.RecvCQ.Wait(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("wait on a stopped peer: %v after %v", err, time.Since(start))
	}
	must(t, c.cmd.Process.Signal(syscall.SIGCONT))
	verbstest.ExpectWC(t, a.RecvCQ, 7, verbs.WCRecv, verbs.WCSuccess, wcTimeout)
}

// waitStopped waits until every thread of process pid is stopped: the
// signal takes effect asynchronously.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(wcTimeout); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		must(t, err)
		stopped := 0
		for _, task := range tasks {
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				continue
			}
			// The state follows the command name in parentheses.
			if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && st[i+2] == 'T' {
				stopped++
			}
		}
		if stopped == len(tasks) {
			return
		}
	}
	t.Fatal("the peer process did not stop")
}
