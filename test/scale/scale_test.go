package scale

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rsock-go/rsock/netconn"
)

var (
	nConns      = flag.Int("scale.conns", 200, "concurrent connections the server process holds")
	link        = flag.String("scale.link", netconn.LinkAuto, "link of both processes: auto (shm on one host), shm, udp, or memif to show its cap")
	size        = flag.Int("scale.size", 4096, "bytes each connection carries each way")
	heapProfile = flag.String("scale.heapprofile", "", "write the server's heap profile, taken while it holds every connection, to this file")
	dialers     = flag.Int("scale.dialers", 32, "dials in flight at once (the listener's pending handshakes are bounded at 64)")
)

// raceMaxConns is the most connections a run under -race holds on the
// udp and memif links: each holds a goroutine on either side (its control
// connection's reader), and the race detector allows 8128. An shm
// connection holds none.
const raceMaxConns = 4000

func TestMain(m *testing.M) {
	if spec := os.Getenv(serverEnv); spec != "" {
		os.Exit(runServer(spec))
	}
	goleak.VerifyTestMain(m)
}

// TestScale: a server process holds -scale.conns rsock connections from
// this process, all of them on RDMA; each carries -scale.size bytes to
// the server and back intact; when all are closed, the server has no more
// file descriptors, goroutines or devices than before the first.
func TestScale(t *testing.T) {
	n := *nConns
	if raceEnabled && n > raceMaxConns && *link != netconn.LinkAuto && *link != netconn.LinkShm {
		t.Skipf("-scale.conns=%d: under -race a process may hold at most %d connections (the race detector's limit of 8128 goroutines); run without -race", n, raceMaxConns)
	}
	nofile, err := raiseNoFile(uint64(4*n + 1024))
	if err != nil {
		t.Fatal(err)
	}
	args := serverArgs{conns: n, link: *link, size: *size, workers: *dialers}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), args.env())
	if *heapProfile != "" {
		cmd.Env = append(cmd.Env, heapProfileEnv+"="+*heapProfile)
	}
	cmd.Stderr = os.Stderr
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
	exited := false
	defer func() {
		if !exited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	reports := bufio.NewScanner(stdout)
	reports.Buffer(nil, 1<<20)
	next := func(phase string) report {
		t.Helper()
		for reports.Scan() {
			line, ok := strings.CutPrefix(reports.Text(), reportPrefix)
			if !ok {
				t.Logf("server: %s", reports.Text())
				continue
			}
			var r report
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("server report %q: %v", line, err)
			}
			if r.Phase != phase || r.Err != "" {
				t.Fatalf("server, %s: %s (waiting for %s)", r.Phase, r.Err, phase)
			}
			return r
		}
		t.Fatalf("server ended before %s: %v", phase, reports.Err())
		return report{}
	}

	listening := next("listening")
	sBase := listening.Usage
	cBase, err := measure()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("RLIMIT_NOFILE: client %d, server %d; link %s, %d dials in flight", nofile, listening.NoFile, *link, *dialers)
	t.Logf("server before: %v", sBase)

	// Dial every connection, a bounded number at once.
	conns := make([]net.Conn, n)
	start := time.Now()
	errs := forEach(n, *dialers, func(i int) error {
		d := netconn.Dialer{Link: *link}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := d.DialContext(ctx, "tcp", listening.Addr)
		conns[i] = c
		return err
	})
	dialSecs := time.Since(start).Seconds()
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	if len(errs) > 0 {
		t.Fatalf("%d of %d dials failed, first: %v", len(errs), n, errs[0])
	}
	accepted := next("accepted")
	cHeld, err := measure()
	if err != nil {
		t.Fatal(err)
	}
	dialed := make(map[string]int)
	for _, c := range conns {
		dialed[describe(c)]++
	}
	t.Logf("dialed %d in %.1f s (%.0f/s): %s", n, dialSecs, float64(n)/dialSecs, counts(dialed))
	t.Logf("server accepted %d in %.1f s from first to last (%.0f/s): %s", n, accepted.Secs, float64(n-1)/max(accepted.Secs, 1e-9), counts(accepted.Transports))
	t.Logf("server holding %d: %v", n, accepted.Usage)
	t.Logf("server per connection: %s", perConn(sBase, accepted.Usage, n))
	t.Logf("client holding %d: %v", n, cHeld)
	t.Logf("client per connection: %s", perConn(cBase, cHeld, n))
	checkTransports(t, *link, dialed)
	checkTransports(t, *link, accepted.Transports)
	if *link == netconn.LinkAuto || *link == netconn.LinkShm {
		// Over shm a connection holds no goroutine of its own on either
		// side once the handshake is done (nor its TCP socket).
		for side, u := range map[string][2]usage{"server": {sBase, accepted.Usage}, "client": {cBase, cHeld}} {
			if g := u[1].Goroutines - u[0].Goroutines; g > 2+n/100 {
				t.Errorf("%s: %d more goroutines holding %d shm connections", side, g, n)
			}
		}
	}

	// Write on every connection, then read every echo.
	start = time.Now()
	errs = forEach(n, *dialers, func(i int) error {
		conns[i].SetDeadline(time.Now().Add(5 * time.Minute))
		_, err := conns[i].Write(payload(i, *size))
		return err
	})
	if len(errs) > 0 {
		t.Fatalf("%d of %d writes failed, first: %v", len(errs), n, errs[0])
	}
	errs = forEach(n, *dialers, func(i int) error {
		got := make([]byte, *size)
		if _, err := io.ReadFull(conns[i], got); err != nil {
			return fmt.Errorf("conn %d: %w", i, err)
		}
		if !bytes.Equal(got, payload(i, *size)) {
			return fmt.Errorf("conn %d: the echo differs from what was sent", i)
		}
		return nil
	})
	if len(errs) > 0 {
		t.Fatalf("%d of %d echoes failed, first: %v", len(errs), n, errs[0])
	}
	echoed := next("echoed")
	t.Logf("%d connections carried %d bytes each way, checked, in %.1f s", n, *size, time.Since(start).Seconds())
	t.Logf("server after the echo: %v", echoed.Usage)
	t.Logf("server per connection after the echo: %s", perConn(sBase, echoed.Usage, n))

	// Close all; the server must come back to where it started.
	start = time.Now()
	// Each Close waits for the peer to acknowledge its CLOSE: a round
	// trip, so they go a bounded number at once.
	errs = forEach(n, *dialers, func(i int) error {
		err := conns[i].Close()
		conns[i] = nil
		if err != nil {
			return fmt.Errorf("conn %d: %w", i, err)
		}
		return nil
	})
	if len(errs) > 0 {
		t.Errorf("%d of %d closes failed, first: %v", len(errs), n, errs[0])
	}
	t.Logf("client closed %d in %.1f s", n, time.Since(start).Seconds())
	if _, err := io.WriteString(stdin, "close\n"); err != nil {
		t.Fatal(err)
	}
	closed := next("closed")
	t.Logf("server after closing all: %v", closed.Usage)
	if u := closed.Usage; u.FDs > sBase.FDs || u.Goroutines > sBase.Goroutines || u.Devices > 0 || u.RDMAConns+u.TCPConns > 0 {
		t.Errorf("server did not come back to its baseline: %d fds (%d before), %d goroutines (%d before), %d devices, %d conns",
			u.FDs, sBase.FDs, u.Goroutines, sBase.Goroutines, u.Devices, u.RDMAConns+u.TCPConns)
	}
	stdin.Close()
	exited = true
	if err := cmd.Wait(); err != nil {
		t.Errorf("server: %v", err)
	}
	// This process's devices linger too; wait for them, for goleak.
	for deadline := time.Now().Add(30 * time.Second); len(netconn.Snapshot().Devices) > 0 && time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
	}
	if u, err := measure(); err != nil {
		t.Error(err)
	} else if u.FDs > cBase.FDs || u.Devices > 0 {
		t.Errorf("client did not come back to its baseline: %d fds (%d before), %d devices", u.FDs, cBase.FDs, u.Devices)
	}
}

// checkTransports fails unless every connection is where the link puts
// it: over auto or shm all on shm, over udp all on the udp link (RDMA),
// over memif at most 64 (a process's memif cap) on memif and the rest on
// TCP.
func checkTransports(t *testing.T, link string, by map[string]int) {
	t.Helper()
	const udp, memif, shm = "rdma/softroce/udp", "rdma/softroce/memif", "rdma/shm"
	for desc, k := range by {
		tr, _, _ := strings.Cut(desc, " (") // a conn on TCP says why not memif
		switch {
		case tr == shm && (link == netconn.LinkAuto || link == netconn.LinkShm):
		case tr == udp && link == netconn.LinkUDP:
		case tr == memif && link == netconn.LinkMemif:
			if k > 64 {
				t.Errorf("%d connections on memif, past the cap of 64 per process", k)
			}
		case tr == "tcp" && link == netconn.LinkMemif:
		default:
			t.Errorf("%d connections on %s, not RDMA over the %s link", k, desc, link)
		}
	}
}

// payload is what connection i sends: size bytes drawn from a generator
// seeded with i, so that a crossed stream shows.
func payload(i, size int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), 0x5ca1e))
	b := make([]byte, size)
	for j := 0; j < len(b); j += 8 {
		v := r.Uint64()
		for k := 0; k < 8 && j+k < len(b); k++ {
			b[j+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// forEach runs f(0..n-1), workers at once, and returns the errors.
func forEach(n, workers int, f func(int) error) []error {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range max(1, workers) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// counts formats transport counts, the largest first.
func counts(by map[string]int) string {
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return by[keys[i]] > by[keys[j]] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", by[k], k)
	}
	return strings.Join(parts, ", ")
}
