//go:build linux

package netconn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/internal/proccpu"
	"github.com/rsock-go/rsock/verbs/shm"
)

// countShm counts the process's shm channels (each side's), the
// goroutines that watch them and the mappings of their arenas.
func countShm(t *testing.T) (channels, watchers, arenas int) {
	t.Helper()
	shmChannels.Lock()
	channels = len(shmChannels.byID) + len(shmChannels.toListener)
	shmChannels.Unlock()
	var left []string
	shmChannelsLeft(&left)
	for _, l := range left {
		if strings.HasPrefix(l, "goroutine") {
			watchers++
		}
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	arenas = strings.Count(string(maps), "rsock-shm-arena")
	return channels, watchers, arenas
}

// TestShmOneChannel: the connections between two processes (here the
// dialer's and the listener's side of one) share one channel: the
// first sets it up, the others reuse it, with no further channel,
// goroutine or arena mapping; all of them carry their own bytes, and
// the channel goes once the last one closed.
func TestShmOneChannel(t *testing.T) {
	ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var first [3]int
	var goroutines int
	for i := range 8 {
		c, s := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall})
		conns = append(conns, c, s)
		if transport(c) != trShm || transport(s) != trShm {
			t.Fatalf("connection %d: transports %q (%q), %q (%q)", i, transport(c), c.(*Conn).FallbackReason(), transport(s), s.(*Conn).FallbackReason())
		}
		ch, w, a := countShm(t)
		if i == 0 {
			goroutines = runtime.NumGoroutine()
			first = [3]int{ch, w, a}
			if ch != 2 || w != 2 || a == 0 {
				t.Fatalf("after the first connection: %d channel ends, %d watchers, %d arena mappings", ch, w, a)
			}
		} else if [3]int{ch, w, a} != first {
			t.Fatalf("connection %d: %d channel ends, %d watchers, %d arena mappings; after the first: %v", i, ch, w, a, first)
		}
	}
	// No goroutine per connection on either end (the control
	// connections closed after the handshake).
	if g := runtime.NumGoroutine(); g > goroutines+2 {
		t.Errorf("%d goroutines after 8 connections, %d after the first", g, goroutines)
	}
	for i := 0; i < len(conns); i += 2 {
		echoCheck(t, conns[i], conns[i+1], 64<<10)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	if left := linkResidue(t); len(left) > 0 {
		t.Fatalf("left once every connection closed: %q", left)
	}
}

// TestShmSetupFails: when the dialer cannot offer a channel, the
// connection runs over TCP and says why.
func TestShmSetupFails(t *testing.T) {
	defer func(f func(shm.Config) (*shm.Listener, error)) { listenShm = f }(listenShm)
	listenShm = func(shm.Config) (*shm.Listener, error) { return nil, errors.New("shm: injected failure") }
	ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
	c, s := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall})
	defer c.Close()
	defer s.Close()
	if transport(c) != "tcp" || transport(s) != "tcp" {
		t.Fatalf("transports %q, %q, want tcp", transport(c), transport(s))
	}
	checkReason(t, "dialer", c, "injected failure")
	echoCheck(t, c, s, 64<<10)
}

// TestShmOfferHostile: a hand-written Hello that offers shm the way rsock
// never does (a file path, another program's abstract socket, a channel
// the listener does not have) is declined: the listener dials nothing,
// and the connection runs over TCP.
func TestShmOfferHostile(t *testing.T) {
	for name, mutate := range map[string]func(h *fallback.Hello){
		"path":       func(h *fallback.Hello) { h.ShmSocket = "/tmp/some.sock" },
		"other-name": func(h *fallback.Hello) { h.ShmSocket = "vpp-api" },
		"no-channel": func(h *fallback.Hello) { h.ShmSocket, h.ShmChannel, h.ShmToken = "", 0xdeadbeef, newShmToken() },
	} {
		t.Run(name, func(t *testing.T) {
			ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			h := offerHello(Plan{Provider: ProviderShm, Link: LinkShm, Offer: true}, planLocal)
			h.Capabilities |= fallback.CapShm
			h.ShmSocket = "rsock-shm-0123456789abcdef01234567"
			mutate(h)
			if err := fallback.WritePreface(c); err != nil {
				t.Fatal(err)
			}
			if err := fallback.WriteHello(c, h); err != nil {
				t.Fatal(err)
			}
			reply, err := fallback.ReadReply(c)
			if err != nil {
				t.Fatal(err)
			}
			if reply.Accept {
				t.Fatalf("the listener accepted a hostile shm offer (%q)", h.ShmSocket)
			}
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if transport(s) != "tcp" || !strings.Contains(s.(*Conn).FallbackReason(), "shm") {
				t.Fatalf("listener: %q (%q)", transport(s), s.(*Conn).FallbackReason())
			}
		})
	}
}

// idleConns is how many connections TestIdleShmConns holds.
const idleConns = 100

func init() { childRoles["idle"] = runIdleDialer }

// runIdleDialer is the child of TestIdleShmConns: it dials idleConns
// connections to addr, echoes 4 KiB on each, says "ready", and then
// waits on all of them (a goroutine blocked in each Read) until stdin
// closes.
func runIdleDialer(addr string) {
	conns := make([]net.Conn, idleConns)
	buf := make([]byte, 4096)
	for i := range conns {
		c, err := (&Dialer{Link: LinkAuto, Stream: streamSmall}).DialContext(context.Background(), "tcp", addr)
		if err != nil {
			fmt.Println("child:", err)
			os.Exit(1)
		}
		if tr := c.(*Conn).Transport(); tr != trShm {
			fmt.Println("child: transport", tr, c.(*Conn).FallbackReason())
			os.Exit(1)
		}
		if _, err := c.Write(buf); err != nil {
			os.Exit(1)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			os.Exit(1)
		}
		conns[i] = c
		go c.Read(make([]byte, 1))
	}
	debug.FreeOSMemory() // see TestIdleShmConns
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
}

// cpuOf returns the CPU time process pid has used (the sum over its
// threads of /proc/PID/task/TID/schedstat, in nanoseconds).
func cpuOf(t *testing.T, pid int) time.Duration {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of %d: %v", pid, err)
	}
	var total time.Duration
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that ended
		}
		var ns int64
		fmt.Sscan(string(b), &ns)
		total += time.Duration(ns)
	}
	return total
}

// TestIdleShmConns: 100 idle shm connections between two processes
// (each end's reader asleep in Read) cost both processes together less
// than 0.5% of a core: nothing polls, no timer fires.
func TestIdleShmConns(t *testing.T) {
	if testing.Short() {
		t.Skip("takes four seconds")
	}
	if raceEnabled {
		t.Skip("the race detector's own work blurs idle CPU: checked in the run without -race")
	}
	ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=idle:"+ln.Addr().String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	var conns []net.Conn
	var wg sync.WaitGroup
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	}()
	for range idleConns {
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, s)
		if transport(s) != trShm {
			t.Fatalf("accepted a connection on %q (%q)", transport(s), s.(*Conn).FallbackReason())
		}
		wg.Go(func() {
			buf := make([]byte, 4096)
			if _, err := io.ReadFull(s, buf); err == nil {
				s.Write(buf)
				s.Read(buf[:1]) // idle until closed
			}
		})
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("child: %q", line)
	}
	// The runtime's scavenger returns freed heap to the OS at up to 1% of
	// a core (more under the race detector, after the package's earlier
	// tests): housekeeping, not the connections' idle cost. Both processes
	// hand it back at once before the windows start.
	debug.FreeOSMemory()
	time.Sleep(200 * time.Millisecond)
	least := 1.0
	var shares []float64
	for range 3 {
		p0, c0, t0 := proccpu.Total(), cpuOf(t, cmd.Process.Pid), time.Now()
		time.Sleep(time.Second)
		used := proccpu.Total() - p0 + cpuOf(t, cmd.Process.Pid) - c0
		share := used.Seconds() / time.Since(t0).Seconds()
		shares = append(shares, share)
		least = min(least, share)
	}
	t.Logf("%d idle shm connections, both processes: %.5f of a core in each window", idleConns, shares)
	if least >= 0.005 {
		t.Fatalf("%d idle shm connections used %.2f%% of a core", idleConns, 100*least)
	}
}
