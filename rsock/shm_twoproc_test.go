//go:build linux

package rsock

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/internal/proccpu"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/shm"
)

// peerEnv makes the test binary the peer process of the two-process
// tests and benchmarks (runPeer); its value is "mode transport n".
const peerEnv = "RSOCK_STREAM_TEST_PEER"

// encodeParams and decodeParams carry Params between the processes as a
// line of text (the test's own handshake; netconn has the real one).
func encodeParams(p Params) string {
	return fmt.Sprintf("%x %d %d %d %d %d %d %d %d", p.GID[:], p.UDPPort, p.QPN, p.PSN, p.MTU, p.RingAddr, p.RingRKey, p.RingSize, p.RecvDepth)
}

func decodeParams(s string) (Params, error) {
	var p Params
	var gid []byte
	_, err := fmt.Sscanf(strings.TrimSpace(s), "%x %d %d %d %d %d %d %d %d", &gid, &p.UDPPort, &p.QPN, &p.PSN, &p.MTU, &p.RingAddr, &p.RingRKey, &p.RingSize, &p.RecvDepth)
	copy(p.GID[:], gid)
	return p, err
}

// shmConnect sets up n streams over the channel on conn: it sends its
// endpoints' parameters to out, one line each, and reads the peer's from
// in.
func shmConnect(conn *net.UnixConn, n int, cfg Config, in *bufio.Reader, out io.Writer) (*shm.Device, []*Stream, error) {
	d, err := shm.Open(conn, shm.Config{})
	if err != nil {
		return nil, nil, err
	}
	eps := make([]*Endpoint, n)
	for i := range eps {
		if eps[i], err = NewEndpoint(d, cfg); err != nil {
			d.Close()
			return nil, nil, err
		}
		fmt.Fprintln(out, encodeParams(eps[i].Params()))
	}
	streams := make([]*Stream, n)
	for i := range eps {
		line, err := in.ReadString('\n')
		var p Params
		if err == nil {
			p, err = decodeParams(line)
		}
		if err == nil {
			streams[i], err = eps[i].Connect(p, ConnectOptions{Net: "shm"})
		}
		if err != nil {
			d.Close()
			return nil, nil, err
		}
	}
	return d, streams, nil
}

// runPeer is the peer process: it connects n streams (over the shm
// channel at fd 3, or TCP to the address in its stdin's first line) and
// serves them in mode: "sink" reads to EOF and answers one byte, "echo"
// echoes 64-byte messages, "idle" leaves each stream in a blocked Read
// and prints the least share of a core it used in three 1 s windows.
func runPeer(spec string) {
	f := strings.Fields(spec)
	mode, tr := f[0], f[1]
	n, _ := strconv.Atoi(f[2])
	in := bufio.NewReader(os.Stdin)
	var conns []net.Conn
	switch tr {
	case "shm":
		fc, err := net.FileConn(os.NewFile(3, "channel"))
		if err != nil {
			fmt.Println("peer:", err)
			os.Exit(1)
		}
		_, streams, err := shmConnect(fc.(*net.UnixConn), n, Config{}, in, os.Stdout)
		if err != nil {
			fmt.Println("peer:", err)
			os.Exit(1)
		}
		for _, s := range streams {
			conns = append(conns, s)
		}
	case "tcp":
		addr, _ := in.ReadString('\n')
		for range n {
			c, err := net.Dial("tcp", strings.TrimSpace(addr))
			if err != nil {
				fmt.Println("peer:", err)
				os.Exit(1)
			}
			conns = append(conns, c)
		}
	}
	switch mode {
	case "sink":
		for _, c := range conns {
			go func() {
				io.Copy(io.Discard, c)
				c.Write([]byte{1})
			}()
		}
	case "echo":
		for _, c := range conns {
			go func() {
				buf := make([]byte, 64)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	case "idle":
		for _, c := range conns {
			go func() {
				var b [1]byte
				c.Read(b[:])
			}()
		}
		least, shares := proccpu.LeastShare(3, time.Second)
		fmt.Printf("%g %v\n", least, shares)
	}
	io.Copy(io.Discard, in) // until the parent closes stdin
	os.Exit(0)
}

// peerProc is a running peer process and this side's streams to it.
type peerProc struct {
	dev   *shm.Device // over shm
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	conns []net.Conn
}

// startPeer starts a peer process serving n connections of transport tr
// in mode, and connects to it.
func startPeer(t testing.TB, mode, tr string, n int) *peerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", peerEnv, mode, tr, n), fmt.Sprintf("GOMAXPROCS=%d", runtime.GOMAXPROCS(0)))
	cmd.Stderr = os.Stderr
	var mine *os.File
	if tr == "shm" {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		mine = os.NewFile(uintptr(fds[0]), "channel")
		theirs := os.NewFile(uintptr(fds[1]), "channel-peer")
		defer theirs.Close()
		cmd.ExtraFiles = []*os.File{theirs}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &peerProc{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(p.stop)
	switch tr {
	case "shm":
		fc, err := net.FileConn(mine)
		mine.Close()
		if err != nil {
			t.Fatal(err)
		}
		d, streams, err := shmConnect(fc.(*net.UnixConn), n, Config{}, p.out, stdin)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		p.dev = d
		for _, s := range streams {
			p.conns = append(p.conns, s)
		}
	case "tcp":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		fmt.Fprintln(stdin, ln.Addr())
		for range n {
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			p.conns = append(p.conns, c)
		}
	}
	return p
}

func (p *peerProc) stop() {
	for _, c := range p.conns {
		c.Close()
	}
	p.stdin.Close()
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

// BenchmarkTwoProcessStream streams to a peer process over shm and over
// TCP loopback, one connection, at 64 KiB and 1 MiB writes (rough
// numbers on a shared machine: compare the two in one run).
func BenchmarkTwoProcessStream(b *testing.B) {
	for _, tr := range []string{"shm", "tcp"} {
		for _, size := range []int{64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", tr, size>>10), func(b *testing.B) {
				p := startPeer(b, "sink", tr, 1)
				c := p.conns[0]
				buf := make([]byte, size)
				b.SetBytes(int64(size))
				cpu0 := proccpu.Total()
				b.ResetTimer()
				for range b.N {
					if _, err := c.Write(buf); err != nil {
						b.Fatal(err)
					}
				}
				if cw, ok := c.(interface{ CloseWrite() error }); ok {
					cw.CloseWrite()
				}
				var ack [1]byte
				if _, err := io.ReadFull(c, ack[:]); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				b.ReportMetric(float64(proccpu.Total()-cpu0)/float64(time.Second)/(float64(b.N)*float64(size)/1e9), "cpu-s/GB")
			})
		}
	}
}

// BenchmarkTwoProcessStream8 streams 64 KiB writes over 8 connections
// at once to a peer process, over shm (one channel) and TCP loopback.
func BenchmarkTwoProcessStream8(b *testing.B) {
	const conns, size = 8, 64 << 10
	for _, tr := range []string{"shm", "tcp"} {
		b.Run(tr, func(b *testing.B) {
			p := startPeer(b, "sink", tr, conns)
			b.SetBytes(size)
			cpu0 := proccpu.Total()
			b.ResetTimer()
			errs := make(chan error, conns)
			for i, c := range p.conns {
				go func() {
					buf := make([]byte, size)
					for range b.N/conns + boolInt(i < b.N%conns) {
						if _, err := c.Write(buf); err != nil {
							errs <- err
							return
						}
					}
					if cw, ok := c.(interface{ CloseWrite() error }); ok {
						cw.CloseWrite()
					}
					var ack [1]byte
					_, err := io.ReadFull(c, ack[:])
					errs <- err
				}()
			}
			for range conns {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(proccpu.Total()-cpu0)/float64(time.Second)/(float64(b.N)*size/1e9), "cpu-s/GB")
		})
	}
}

// BenchmarkTwoProcessPingPong measures 64-byte round trips to an echoing
// peer process over shm and over TCP loopback.
func BenchmarkTwoProcessPingPong(b *testing.B) {
	for _, tr := range []string{"shm", "tcp"} {
		b.Run(tr, func(b *testing.B) {
			p := startPeer(b, "echo", tr, 1)
			c := p.conns[0]
			buf := make([]byte, 64)
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestShmIdleConnections: 100 idle connections between two processes
// over shm, each with a goroutine blocked in Read on both sides, cost
// less than 0.5% of a core in each process (the least of three 1 s
// windows).
func TestShmIdleConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 3 s of measuring")
	}
	p := startPeer(t, "idle", "shm", 100)
	for _, c := range p.conns {
		go func() {
			var b [1]byte
			c.Read(b[:])
		}()
	}
	least, shares := proccpu.LeastShare(3, time.Second)
	line, err := p.out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var peerLeast float64
	if _, err := fmt.Sscan(line, &peerLeast); err != nil {
		t.Fatalf("peer said %q", line)
	}
	t.Logf("100 idle shm connections: this process %.3f%% of a core (windows %v), the peer %.3f%% (%s)", least*100, shares, peerLeast*100, strings.TrimSpace(line))
	if least > 0.005 || peerLeast > 0.005 {
		t.Fatalf("idle connections cost %.2f%% and %.2f%% of a core", least*100, peerLeast*100)
	}
	_ = verbs.ErrClosed
}

// TestShmPeerKilled: the peer process of a stream over shm is killed
// with SIGKILL while this side waits in Read; Read fails within
// milliseconds with an error wrapping ECONNRESET, Write fails too, and
// once the stream and the device are closed no mapping or descriptor of
// the channel is left (goroutines: goleak in TestMain).
func TestShmPeerKilled(t *testing.T) {
	baseline := shmHeld(t)
	p := startPeer(t, "echo", "shm", 1)
	s := p.conns[0].(*Stream)
	if _, err := s.Write(make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(s, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 64))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	took := time.Since(start)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read after the kill: %v", err)
	}
	if _, err := s.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Write after the kill: %v", err)
	}
	t.Logf("Read failed %v after SIGKILL: %v", took, err)
	if took > time.Second {
		t.Errorf("Read failed only %v after the kill", took)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	p.dev.Close()
	if r := shmResidue(shmHeld(t), baseline); len(r) != 0 {
		t.Fatalf("left behind: %q", r)
	}
}

// shmHeld lists the mappings and descriptors of the provider's memfds and
// the eventfds this process holds.
func shmHeld(t *testing.T) []string {
	t.Helper()
	var out []string
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(maps), "\n") {
		if strings.Contains(l, "rsock-shm") {
			out = append(out, "map: "+l)
		}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		if strings.Contains(l, "rsock-shm") || strings.Contains(l, "eventfd") {
			out = append(out, "fd: "+l)
		}
	}
	return out
}

// shmResidue returns what held has beyond baseline.
func shmResidue(held, baseline []string) []string {
	seen := map[string]int{}
	for _, b := range baseline {
		seen[b]++
	}
	var out []string
	for _, r := range held {
		if seen[r] > 0 {
			seen[r]--
			continue
		}
		out = append(out, r)
	}
	return out
}

// TestShmWriteDoesNotAllocate: a Write over shm (the direct path) and the
// Read that takes it allocate nothing.
func TestShmWriteDoesNotAllocate(t *testing.T) {
	a, b := shmDevs(t)
	sa, sb := shmStreams(t, a, b, Config{RingSize: 1 << 20})
	defer sa.Close()
	defer sb.Close()
	buf := make([]byte, 4096)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := sa.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(sb, buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per Write and Read", allocs)
	}
}

// TestShmPeerStopped: with the peer process stopped (SIGSTOP), read and
// write deadlines still fire (the writer fills the peer's ring first).
func TestShmPeerStopped(t *testing.T) {
	p := startPeer(t, "echo", "shm", 1)
	s := p.conns[0].(*Stream)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer p.cmd.Process.Signal(syscall.SIGCONT)
	s.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	start := time.Now()
	if _, err := s.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("Read from a stopped peer: %v after %v", err, time.Since(start))
	}
	s.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	big := make([]byte, 64<<20) // more than the peer's ring: the writer must wait
	if n, err := s.Write(big); !errors.Is(err, os.ErrDeadlineExceeded) || n >= len(big) {
		t.Fatalf("Write to a stopped peer: %d bytes, %v", n, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}
