//go:build linux

package rsock

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/nettest"

	"github.com/rsock-go/rsock/verbs/shm"
)

// shmDevs returns two shm devices joined by a channel in this process,
// with a PD each.
func shmDevs(t testing.TB) (a, b *shmDev) {
	t.Helper()
	return shmDevsN(t, 256)
}

// shmDevsN is shmDevs with room for maxQPs queue pairs on each side.
func shmDevsN(t testing.TB, maxQPs int) (a, b *shmDev) {
	t.Helper()
	da, db, err := shm.Pair(shm.Config{MaxQPs: maxQPs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	return &shmDev{dev: da}, &shmDev{dev: db}
}

// shmDev is one end of a shm channel; each endpoint on it allocates a
// protection domain of its own.
type shmDev struct {
	dev *shm.Device
}

// shmStreams connects two streams over a shm channel.
func shmStreams(t testing.TB, a, b *shmDev, cfg Config) (*Stream, *Stream) {
	t.Helper()
	ea, err := NewEndpoint(a.dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := NewEndpoint(b.dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	addrA := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	addrB := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2}
	sa, err := ea.Connect(eb.Params(), ConnectOptions{Net: "tcp", LocalAddr: addrA, RemoteAddr: addrB})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := eb.Connect(ea.Params(), ConnectOptions{Net: "tcp", LocalAddr: addrB, RemoteAddr: addrA})
	if err != nil {
		t.Fatal(err)
	}
	if sa.iw == nil || sa.kw == nil {
		t.Fatal("a stream over shm does not use the direct write and the CQ's own wait")
	}
	return sa, sb
}

// TestShmNetConn runs x/net's net.Conn conformance suite (deadlines,
// concurrent use, close) over streams on a shm channel.
func TestShmNetConn(t *testing.T) {
	a, b := shmDevs(t)
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
		sa, sb := shmStreams(t, a, b, Config{RingSize: 64 << 10})
		return sa, sb, func() { sa.Close(); sb.Close() }, nil
	})
}

// TestShmBothWays moves random bytes both ways at once over shm, with
// writes larger than the ring, and checks that no byte went through the
// send ring: Write copies straight into the peer's ring.
func TestShmBothWays(t *testing.T) {
	a, b := shmDevs(t)
	for _, rs := range []int{4 << 10, 64 << 10, 1 << 20} {
		t.Run(fmt.Sprint(rs), func(t *testing.T) {
			total := 16 << 20
			sa, sb := shmStreams(t, a, b, Config{RingSize: rs})
			defer sa.Close()
			defer sb.Close()
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for i, pair := range [][2]*Stream{{sa, sb}, {sb, sa}} {
				w, r := pair[0], pair[1]
				seed := uint64(i)
				wg.Add(2)
				sum := make(chan []byte, 1)
				go func() {
					defer wg.Done()
					h := sha256.New()
					rnd := rand.New(rand.NewPCG(seed, 9))
					buf := make([]byte, 3*rs+17)
					for left := total; left > 0; {
						n := min(left, 1+rnd.IntN(len(buf)))
						for j := range buf[:n] {
							buf[j] = byte(rnd.Uint32())
						}
						if _, err := w.Write(buf[:n]); err != nil {
							errs <- err
							return
						}
						h.Write(buf[:n])
						left -= n
					}
					if err := w.CloseWrite(); err != nil {
						errs <- err
					}
					sum <- h.Sum(nil)
				}()
				go func() {
					defer wg.Done()
					h := sha256.New()
					got, err := io.Copy(h, r)
					if err != nil || got != int64(total) {
						errs <- fmt.Errorf("read %d bytes: %v", got, err)
						return
					}
					if want := <-sum; !bytes.Equal(h.Sum(nil), want) {
						errs <- errors.New("SHA-256 differs")
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for _, s := range []*Stream{sa, sb} {
				s.mu.Lock()
				head := s.sendHead
				s.mu.Unlock()
				if head != 0 {
					t.Fatalf("%d bytes went through the send ring", head)
				}
			}
		})
	}
}

// settledGoroutines returns the number of goroutines once it has not
// changed for 50 ms (at most a second), so that goroutines of earlier tests
// still ending are not counted against this one.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for stable, deadline := 0, time.Now().Add(time.Second); stable < 5 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		if m := runtime.NumGoroutine(); m == n {
			stable++
		} else {
			n, stable = m, 0
		}
	}
	return n
}

// TestShmNoGoroutinePerStream: streams over shm, idle or with a reader
// blocked in Read, start no goroutine of their own (no Notify hand-off).
func TestShmNoGoroutinePerStream(t *testing.T) {
	a, b := shmDevs(t)
	before := settledGoroutines()
	var streams []*Stream
	for range 20 {
		sa, sb := shmStreams(t, a, b, Config{RingSize: 16 << 10})
		streams = append(streams, sa, sb)
	}
	defer func() {
		for _, s := range streams {
			s.Close()
		}
	}()
	readers := make(chan error, 1)
	go func() {
		var buf [8]byte
		_, err := streams[1].Read(buf[:])
		readers <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if n := settledGoroutines() - before; n != 1 {
		t.Fatalf("%d goroutines for 20 connections and one blocked reader, want 1 (the reader)", n)
	}
	if _, err := streams[0].Write([]byte("wake up")); err != nil {
		t.Fatal(err)
	}
	if err := <-readers; err != nil {
		t.Fatal(err)
	}
}

// TestShmPeerGone: when the channel ends (the peer process's socket
// closes), a blocked Read and a Write fail with ECONNRESET at once.
func TestShmPeerGone(t *testing.T) {
	a, b := shmDevs(t)
	sa, sb := shmStreams(t, a, b, Config{RingSize: 64 << 10})
	defer sa.Close()
	defer sb.Close()
	errc := make(chan error, 1)
	go func() {
		var buf [8]byte
		_, err := sa.Read(buf[:])
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	b.dev.Close()
	err := <-errc
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read: %v, want ECONNRESET", err)
	}
	t.Logf("Read failed %v after the peer's end closed", time.Since(start))
	if _, err := sa.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Write: %v, want ECONNRESET", err)
	}
}

// TestShmConnectionMemory: 1000 idle connections over one shm channel
// cost little beyond their rings' pages in use: the process's RSS plus
// the host's shared memory (memfd pages, mapped or not; other processes
// add noise, so the bound is loose) grow by less than 128 KiB per
// connection (both ends in this process).
func TestShmConnectionMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("1000 connections")
	}
	if raceEnabled {
		t.Skip("the race detector's shadow memory multiplies RSS")
	}
	a, b := shmDevsN(t, 1024)
	runtime.GC()
	before := rss(t) + shmem(t)
	const n = 1000
	streams := make([]*Stream, 0, 2*n)
	defer func() {
		for _, s := range streams {
			s.Close()
		}
	}()
	for range n {
		sa, sb := shmStreams(t, a, b, Config{})
		streams = append(streams, sa, sb)
	}
	runtime.GC()
	per := (rss(t) + shmem(t) - before) / n
	t.Logf("%d connections (512 KiB rings): %d KiB of RSS and shared memory each, both ends", n, per>>10)
	if per > 128<<10 {
		t.Fatalf("%d KiB per idle connection", per>>10)
	}
}

// rss returns the process's resident set size in bytes.
func rss(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	var size, res int
	fmt.Sscan(string(b), &size, &res)
	return res * os.Getpagesize()
}

// shmem returns the host's shared memory in bytes (Shmem in /proc/meminfo).
func shmem(t *testing.T) int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		var kb int
		if _, err := fmt.Sscanf(l, "Shmem: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	t.Fatal("no Shmem in /proc/meminfo")
	return 0
}
