//go:build linux

package netconn

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/internal/proccpu"
	"github.com/rsock-go/rsock/rsock"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/memif"
)

// TestLinkSelection: which link each pair of link settings ends up on,
// and what FallbackReason says on each side.
func TestLinkSelection(t *testing.T) {
	cases := []struct {
		dial, listen       string
		want               string // transport of both ends
		dialWhy, listenWhy string // substrings of the reasons; "" means empty
	}{
		{LinkAuto, LinkAuto, trShm, "", ""},
		{LinkShm, LinkShm, trShm, "", ""},
		{LinkShm, LinkAuto, trShm, "", ""},
		{LinkAuto, LinkShm, trShm, "", ""},
		{LinkMemif, LinkMemif, trMemif, "", ""},
		{LinkMemif, LinkAuto, trMemif, "", ""},
		// A setting that names a link keeps it: auto offers shm.
		{LinkAuto, LinkMemif, "tcp", "declined by the listener: " + FallbackSetup + ":", "does not run shm"},
		{LinkShm, LinkMemif, "tcp", "declined by the listener: " + FallbackSetup + ":", "does not run shm"},
		{LinkMemif, LinkShm, "tcp", "declined by the listener: " + FallbackSetup + ":", "does not run memif"},
		{LinkUDP, LinkAuto, trUDP, "", ""}, // the listener answers the link the dialer names
		// A same-host offer is the dialer's only endpoint: a listener that
		// does not take it declines, and the dialer hears only the kind.
		{LinkAuto, LinkUDP, "tcp", "declined by the listener: " + FallbackSetup + ":", "does not run shm"},
		{LinkShm, LinkUDP, "tcp", "declined by the listener: " + FallbackSetup + ":", "does not run shm"},
		{LinkUDP, LinkUDP, trUDP, "", ""},
		{LinkMemif, LinkUDP, "tcp", "declined by the listener: " + FallbackSetup + ":", "does not run memif"},
		{LinkUDP, LinkMemif, "tcp", "declined by the listener: " + FallbackSetup + ":", "memif only"},
	}
	for _, tc := range cases {
		t.Run(tc.dial+"-to-"+tc.listen, func(t *testing.T) {
			ln := listen(t, ListenConfig{Link: tc.listen, Stream: streamSmall})
			c, s := connPair(t, ln, &Dialer{Link: tc.dial, Stream: streamSmall})
			defer c.Close()
			defer s.Close()
			if transport(c) != tc.want || transport(s) != tc.want {
				t.Fatalf("transports %q, %q, want %q", transport(c), transport(s), tc.want)
			}
			checkReason(t, "dialer", c, tc.dialWhy)
			checkReason(t, "listener", s, tc.listenWhy)
			echoCheck(t, c, s, 256<<10)
		})
	}
}

// TestMemifRingSize: a memif conn with no ring size configured gets
// memifRingSize on both ends, one over udp pathRingSize, and a
// configured size holds over memif and udp too.
func TestMemifRingSize(t *testing.T) {
	noShm(t)
	for _, tc := range []struct {
		link   string
		config int
		want   int
	}{
		{LinkAuto, 0, memifRingSize},
		{LinkUDP, 0, pathRingSize},
		{LinkAuto, 64 << 10, 64 << 10},
		{LinkUDP, 64 << 10, 64 << 10},
	} {
		ln := listen(t, ListenConfig{Link: tc.link, Stream: rsock.Config{RingSize: tc.config}})
		c, s := connPair(t, ln, &Dialer{Link: tc.link, Stream: rsock.Config{RingSize: tc.config}})
		for _, conn := range []*Conn{c.(*Conn), s.(*Conn)} {
			if st := conn.Stats(); st.RingSize != tc.want {
				t.Errorf("%s, configured %d: %s end has a %d-byte ring, want %d", tc.link, tc.config, st.Transport, st.RingSize, tc.want)
			}
		}
		echoCheck(t, c, s, 256<<10)
		c.Close()
		s.Close()
	}
}

// TestMemifSetupFails: when the listener cannot connect to the offer,
// the pair runs over TCP (auto does not fall to udp, slower than TCP on
// one host); the listener says why, and the dialer hears only the kind.
func TestMemifSetupFails(t *testing.T) {
	noShm(t)
	failure := errors.New("memif: injected failure")
	defer func(d func(string, string, memif.Config) (*memif.Link, error)) { dialMemif = d }(dialMemif)
	dialMemif = func(string, string, memif.Config) (*memif.Link, error) { return nil, failure }
	for _, tc := range []struct{ listen, want string }{{LinkAuto, "tcp"}, {LinkMemif, "tcp"}} {
		t.Run(tc.listen, func(t *testing.T) {
			ln := listen(t, ListenConfig{Link: tc.listen, Stream: streamSmall})
			c, s := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall})
			defer c.Close()
			defer s.Close()
			if transport(c) != tc.want || transport(s) != tc.want {
				t.Fatalf("transports %q, %q, want %q", transport(c), transport(s), tc.want)
			}
			checkReason(t, "dialer", c, "declined by the listener: "+declineText(FallbackSetup))
			checkReason(t, "listener", s, "injected failure")
			if strings.Contains(c.(*Conn).FallbackReason(), "injected") {
				t.Errorf("the listener's local error reached the dialer: %q", c.(*Conn).FallbackReason())
			}
			echoCheck(t, c, s, 64<<10)
		})
	}
}

// tcpLoopback returns both ends of a TCP connection on loopback.
func tcpLoopback(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestMemifOfferSecret: the secret is 128 random bits (22 characters of
// base64url); clients with the wrong secret, however many, are refused
// and the offer stays open for the peer that has it; an offer nobody
// takes times out.
func TestMemifOfferSecret(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	tcp, _ := tcpLoopback(t) // this process holds the peer end
	o, err := newMemifOffer(tcp, lo, time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	if raw, err := base64.RawURLEncoding.DecodeString(o.secret); err != nil || len(raw) != 16 || len(o.secret) > memif.SecretLen-1 {
		t.Fatalf("offer secret %q: %d bytes decoded (%v), want 16 in at most %d characters", o.secret, len(raw), err, memif.SecretLen-1)
	}
	if !strings.HasPrefix(o.socket, "@") {
		t.Fatalf("offer socket %q", o.socket)
	}
	cfg := memifConfig(lo, time.Now().Add(5*time.Second))
	for i := range 20 {
		if l, err := memif.Dial(o.socket, fmt.Sprintf("wrong-secret-%d", i), cfg); err == nil {
			l.Close()
			t.Fatal("a wrong secret connected")
		}
	}
	l, err := memif.Dial(o.socket, o.secret, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, err := o.take(time.Now().Add(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got.Close()
	if _, err := memif.Dial(o.socket, o.secret, cfg); err == nil {
		t.Fatal("the offer took a second client")
	}

	idle, err := newMemifOffer(tcp, lo, time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer idle.close()
	if _, err := idle.take(time.Now().Add(20 * time.Millisecond)); err == nil || !strings.Contains(err.Error(), "did not connect") {
		t.Fatalf("take of an offer nobody took: %v", err)
	}
}

// Environment of the memif attacker child (childEnv=memif-attack).
const (
	attackSocketEnv = "RSOCK_NETCONN_TEST_MEMIF_SOCKET"
	attackSecretEnv = "RSOCK_NETCONN_TEST_MEMIF_SECRET"
)

func init() { childRoles["memif-attack"] = func(string) { runMemifAttacker() } }

// runMemifAttacker is a local process that learned a memif offer's
// socket and secret: it connects and prints whether it got in.
func runMemifAttacker() {
	l, err := memif.Dial(os.Getenv(attackSocketEnv), os.Getenv(attackSecretEnv),
		memif.Config{Log2RingSize: 4, HandshakeTimeout: 3 * time.Second})
	if err != nil {
		fmt.Println("refused:", err)
		return
	}
	l.Close()
	fmt.Println("connected")
}

// memifAttack runs runMemifAttacker in a child process, as nobody if
// asked, and returns what it printed.
func memifAttack(t *testing.T, socket, secret string, nobody bool) string {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=memif-attack", attackSocketEnv+"="+socket, attackSecretEnv+"="+secret)
	if nobody {
		cmd.Path = copyForNobody(t)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("child failed: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// copyForNobody copies the test binary where user nobody may run it.
func copyForNobody(t *testing.T) string {
	dir, err := os.MkdirTemp("", "rsock-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "child")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMemifOfferHostile: while the listener is about to connect to a
// dialer's memif offer, local attackers get there first (the socket is
// abstract, listed in /proc/net/unix): another process of the same user
// and one running as nobody, both with the right secret (as if they had
// read it off loopback), are refused by the peer-credential check; 20
// clients with wrong secrets and 10 that connect and stall (from the
// listener's own process, which passes that check) are refused or shed.
// Then the listener connects and both ends are on memif. The old offer
// took the first client with the secret and gave up after 8 wrong ones.
func TestMemifOfferHostile(t *testing.T) {
	noShm(t)
	var attacked []string
	defer func(d func(string, string, memif.Config) (*memif.Link, error)) { dialMemif = d }(dialMemif)
	dialMemif = func(socket, secret string, cfg memif.Config) (*memif.Link, error) {
		if unix, err := os.ReadFile("/proc/net/unix"); err == nil && !strings.Contains(string(unix), socket[1:]) {
			t.Errorf("offer %s not listed in /proc/net/unix", socket)
		}
		attacked = append(attacked, "same uid: "+memifAttack(t, socket, secret, false))
		if os.Getuid() == 0 {
			attacked = append(attacked, "nobody: "+memifAttack(t, socket, secret, true))
		} else {
			t.Log("not root: no attacker as nobody")
		}
		attack := memif.Config{Log2RingSize: 4, HandshakeTimeout: 2 * time.Second}
		for i := range 20 {
			if l, err := memif.Dial(socket, fmt.Sprintf("wrong-%d", i), attack); err == nil {
				l.Close()
				attacked = append(attacked, "wrong secret: connected")
			}
		}
		for range 10 {
			c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: socket, Net: "unixpacket"})
			if err != nil {
				t.Errorf("stall: %v", err)
				continue
			}
			defer c.Close()
		}
		return memif.Dial(socket, secret, cfg)
	}
	ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
	c, s := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall})
	defer c.Close()
	defer s.Close()
	for _, a := range attacked {
		if !strings.Contains(a, "refused") {
			t.Errorf("attacker: %s", a)
		}
	}
	if len(attacked) == 0 {
		t.Fatal("the listener never connected to the offer")
	}
	t.Logf("attackers: %q", attacked)
	if transport(c) != trMemif || transport(s) != trMemif {
		t.Fatalf("transports %q (%q), %q (%q), want memif", transport(c), c.(*Conn).FallbackReason(), transport(s), s.(*Conn).FallbackReason())
	}
	echoCheck(t, c, s, 64<<10)
}

// TestHostileMemifOffer: a dialer's memif offer (beside a udp endpoint,
// as older dialers sent it) that names a socket rsock does not make is
// never connected to, and the listener answers on udp; one that names an
// rsock-like socket that is not a memif server (here one that answers
// garbage) or nothing gets a Decline that says only the kind: the same
// bytes whatever the local error. The listener goes on serving.
func TestHostileMemifOffer(t *testing.T) {
	ln := listen(t, ListenConfig{Link: LinkAuto, HandshakeTimeout: 2 * time.Second})
	junkName := "@rsock-memif-" + strings.Repeat("0f", 16)
	junk, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: junkName, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	var dialed sync.WaitGroup
	go func() {
		for {
			c, err := junk.Accept()
			if err != nil {
				return
			}
			dialed.Done()
			c.Write([]byte("not a memif hello"))
			c.Close()
		}
	}()
	good := &fallback.Hello{Version: fallback.Version, Capabilities: fallback.CapStream | fallback.CapMemif, Provider: "softroce", Link: "udp",
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}, UDPPort: 4791, QPN: 0x11, MTU: 1024, RingAddr: 4096, RingRKey: 1, RingSize: 4096, RecvDepth: 64,
		MemifSecret: strings.Repeat("ab", 11)}
	for _, tc := range []struct {
		sock    string
		decline bool
	}{
		{junkName, true},
		{"@rsock-memif-" + strings.Repeat("e1", 16), true}, // nobody listens
		{"@rsock-test-nobody", false},
		{filepath.Join(t.TempDir(), "none"), false},
		{"/proc/self/status", false},
	} {
		h := *good
		h.MemifSocket = tc.sock
		if tc.sock == junkName {
			dialed.Add(1)
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if err := fallback.WritePrefaceAndHello(c, &h); err != nil {
			t.Fatal(err)
		}
		reply, err := fallback.ReadReply(c)
		c.Close()
		if err != nil {
			t.Fatalf("offer %q: %v", tc.sock, err)
		}
		switch {
		case tc.decline && (reply.Accept || reply.Reason != declineText(FallbackSetup)):
			t.Errorf("offer %q: reply %+v, want a Decline saying %q and nothing else", tc.sock, reply, declineText(FallbackSetup))
		case tc.decline:
			// The declined conn is served over TCP; the listener's end
			// keeps the local cause.
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			var fe *FallbackError
			if !errors.As(s.(*Conn).FallbackError(), &fe) || fe.Kind != FallbackSetup || fe.Side != SideListener || !strings.Contains(fe.Error(), "memif") {
				t.Errorf("offer %q: the listener's conn says %v", tc.sock, s.(*Conn).FallbackError())
			}
		case !tc.decline && (!reply.Accept || reply.Hello.Link != LinkUDP || reply.Reason != ""):
			t.Errorf("offer %q: reply %+v, want an Accept on udp", tc.sock, reply)
		}
	}
	dialed.Wait() // the junk server was connected to: the Decline follows a real failure
	// The listener still serves.
	c, s := connPair(t, ln, &Dialer{Stream: streamSmall})
	defer c.Close()
	defer s.Close()
	echoCheck(t, c, s, 64<<10)
}

// TestMemifWire: with $RSOCK_MEMIF_WIRE, connections share one device on
// an external memif server instead of a memif link each. The server here
// is a hairpin (it sends every frame back), so both ends share that one
// device; test/memif/testpmd.sh runs two processes across dpdk-testpmd.
func TestMemifWire(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "wire.sock")
	wln, err := memif.Listen(sock, "wire-secret", memif.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer wln.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer wln.Close()
	wg.Add(1)
	go func() { // a client at a time, as a memif port serves one
		defer wg.Done()
		for {
			l, err := wln.Accept()
			if err != nil {
				return
			}
			hairpin(l)
		}
	}()
	t.Setenv(EnvMemifWire, sock)
	t.Setenv(EnvMemifSecret, "wire-secret")
	ln := listen(t, ListenConfig{Link: LinkMemif, Stream: streamSmall})
	for range 2 {
		c, s := connPair(t, ln, &Dialer{Link: LinkMemif, Stream: streamSmall})
		if transport(c) != trMemif || transport(s) != trMemif {
			t.Fatalf("transports %q, %q (%q, %q)", transport(c), transport(s), c.(*Conn).FallbackReason(), s.(*Conn).FallbackReason())
		}
		if c.(*Conn).dev != s.(*Conn).dev || c.(*Conn).dev.private {
			t.Fatal("the ends do not share the wire's device")
		}
		echoCheck(t, c, s, 1<<20)
		c.Close()
		s.Close()
	}
	t.Setenv(EnvMemifWire, "")
	if _, err := resolve("", LinkUDP, streamSmall); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvMemifWire, sock)
	if _, err := resolve("", LinkUDP, streamSmall); err == nil {
		t.Fatal("a memif wire with link udp resolved")
	}
}

// hairpin sends every frame l receives back, until l fails.
func hairpin(l *memif.Link) {
	defer l.Close()
	pkts := make([]link.Packet, 32)
	for i := range pkts {
		pkts[i].Buf = make([]byte, 9216)
	}
	for {
		n, err := l.Recv(pkts)
		if err != nil || l.Send(pkts[:n]) != nil {
			return
		}
	}
}

// TestIdleMemifConn: a connected memif pair with a Read waiting on each
// end costs under 1% of a core while nothing moves (the links sleep on
// their eventfds, the queue pairs' timers are idle).
func TestIdleMemifConn(t *testing.T) {
	if testing.Short() {
		t.Skip("takes three seconds")
	}
	ln := listen(t, ListenConfig{Link: LinkMemif})
	c, s := connPair(t, ln, &Dialer{Link: LinkMemif})
	echoCheck(t, c, s, 1<<20) // traffic first, so that the links have been polling
	var wg sync.WaitGroup
	for _, conn := range []net.Conn{c, s} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn.Read(make([]byte, 1))
		}()
	}
	time.Sleep(200 * time.Millisecond)
	// The least of three one-second windows is the connection's own cost.
	share, shares := proccpu.LeastShare(3, time.Second)
	t.Logf("idle memif connection: %.4f of a core in each window", shares)
	c.Close()
	s.Close()
	wg.Wait()
	if share >= 0.01 {
		t.Fatalf("an idle memif connection used %.2f%% of a core", 100*share)
	}
}

// TestMemifConnsBounded: past maxMemifConns memif connections in the
// process, further same-host connections use TCP (auto: udp is slower)
// and say why; closing one makes room again.
func TestMemifConnsBounded(t *testing.T) {
	noShm(t)
	defer func(n int64) { maxMemifConns = n }(maxMemifConns)
	maxMemifConns = memifConns.Load() + 2 // a pair's two ends
	ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
	c1, s1 := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall})
	defer s1.Close()
	c2, s2 := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall})
	defer c2.Close()
	defer s2.Close()
	if transport(c1) != trMemif || transport(c2) != "tcp" || transport(s2) != "tcp" {
		t.Fatalf("transports %q then %q, %q", transport(c1), transport(c2), transport(s2))
	}
	checkReason(t, "dialer", c2, "most memif connections")
	echoCheck(t, c2, s2, 64<<10)
	c1.Close()
	s1.Close()
	c3, s3 := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall})
	defer c3.Close()
	defer s3.Close()
	if transport(c3) != trMemif {
		t.Fatalf("after a memif connection closed: %q (%q)", transport(c3), c3.(*Conn).FallbackReason())
	}
}

// TestMemifConnsBoundedConcurrent: dialers racing for the last memif
// connections of the process never get more than maxMemifConns of them
// (a slot is taken when a dialer offers memif or a listener takes the
// offer, not when the device opens, a handshake later), the others run
// on TCP, and closing them all gives every slot back.
func TestMemifConnsBoundedConcurrent(t *testing.T) {
	noShm(t)
	defer func(n int64) { maxMemifConns = n }(maxMemifConns)
	start := memifConns.Load()
	maxMemifConns = start + 4 // two pairs' ends
	ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
	const n = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		conns   []net.Conn
		dialErr = make(chan error, n)
	)
	for range n {
		wg.Go(func() {
			c, err := (&Dialer{Link: LinkAuto, Stream: streamSmall}).DialContext(context.Background(), "tcp", ln.Addr().String())
			if err != nil {
				dialErr <- err
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		})
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		conns = append(conns, s)
		mu.Unlock()
	}
	wg.Wait()
	close(dialErr)
	for err := range dialErr {
		t.Fatal(err)
	}
	onMemif := 0
	for _, c := range conns {
		switch transport(c) {
		case trMemif:
			onMemif++
		case "tcp":
		default:
			t.Errorf("a connection on %q (%q)", transport(c), c.(*Conn).FallbackReason())
		}
	}
	if onMemif > 4 || memifConns.Load()-start > 4 {
		t.Errorf("%d connection ends on memif, %d memif slots taken: the cap is 4", onMemif, memifConns.Load()-start)
	}
	for _, c := range conns {
		c.Close()
	}
	if got := memifConns.Load(); got != start {
		t.Errorf("memif slots after closing every connection: %d, want %d", got, start)
	}
}
