//go:build linux

package memif

import (
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs/softroce/link/internal/eventfd"
)

// rawPeer is a hand-driven end of a control channel.
type rawPeer struct {
	t *testing.T
	c *net.UnixConn
}

func (p *rawPeer) send(m Msg, fds ...int) {
	p.t.Helper()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := p.c.WriteMsgUnix(m, oob, nil); err != nil {
		p.t.Fatal(err)
	}
}

func (p *rawPeer) msg(typ MsgType, fill func(Msg), fds ...int) {
	p.t.Helper()
	m := make(Msg, MsgLen)
	m.Reset(typ)
	if fill != nil {
		fill(m)
	}
	p.send(m, fds...)
}

// recv returns the next message's type and, for a DISCONNECT, its reason.
func (p *rawPeer) recv() (MsgType, string) {
	p.t.Helper()
	b := make([]byte, MsgLen)
	p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := p.c.Read(b)
	if err != nil || n != MsgLen {
		return MsgNone, ""
	}
	m := Msg(b)
	if m.Type() == MsgDisconnect {
		return MsgDisconnect, m.Disconnect().Reason()
	}
	return m.Type(), ""
}

func goodInit(m Msg) {
	m.Init().Encode(&InitFields{Version: Version, Mode: ModeEthernet, Secret: testSecret, Name: "raw"})
}

func memfd(t *testing.T, size int, seal bool) int {
	t.Helper()
	fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if seal {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func pipeFD(t *testing.T) int {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return p[0]
}

func evfd(t *testing.T) int {
	t.Helper()
	fd, err := eventfd.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// TestServerRejectsGarbage drives a listener by hand with broken clients:
// each handshake fails with a clear error, the client is told why, and
// the listener keeps serving.
func TestServerRejectsGarbage(t *testing.T) {
	region := func(p *rawPeer) {
		p.msg(MsgInit, goodInit)
		p.recv()
		p.msg(MsgAddRegion, func(m Msg) { m.AddRegion().Encode(0, 4096) }, memfd(p.t, 4096, true))
		p.recv()
	}
	cases := []struct {
		name string
		run  func(p *rawPeer)
		want string
	}{
		{"short message", func(p *rawPeer) { p.send(Msg("hello")) }, "5-byte message"},
		{"long message", func(p *rawPeer) { p.send(make(Msg, 200)) }, "129-byte message"},
		{"unknown type", func(p *rawPeer) { p.msg(77, nil) }, "message type UNKNOWN(77)"},
		{"region before init", func(p *rawPeer) { p.msg(MsgAddRegion, nil) }, "got ADD_REGION, want INIT"},
		{"wrong secret", func(p *rawPeer) {
			p.msg(MsgInit, func(m Msg) { m.Init().Encode(&InitFields{Version: Version, Secret: "guess"}) })
		}, "incorrect secret"},
		{"no secret", func(p *rawPeer) { p.msg(MsgInit, func(m Msg) { m.Init().Encode(&InitFields{Version: Version}) }) }, "incorrect secret"},
		{"wrong id", func(p *rawPeer) {
			p.msg(MsgInit, func(m Msg) { m.Init().Encode(&InitFields{Version: Version, ID: 3, Secret: testSecret}) })
		}, "id 3 not found"},
		{"wrong version", func(p *rawPeer) {
			p.msg(MsgInit, func(m Msg) { m.Init().Encode(&InitFields{Version: 0x0100, Secret: testSecret}) })
		}, "version"},
		{"IP mode", func(p *rawPeer) {
			p.msg(MsgInit, func(m Msg) { m.Init().Encode(&InitFields{Version: Version, Mode: ModeIP, Secret: testSecret}) })
		}, "mode 1"},
		{"region without fd", func(p *rawPeer) {
			p.msg(MsgInit, goodInit)
			p.recv()
			p.msg(MsgAddRegion, func(m Msg) { m.AddRegion().Encode(0, 4096) })
		}, "without a file descriptor"},
		{"region from a pipe", func(p *rawPeer) {
			p.msg(MsgInit, goodInit)
			p.recv()
			p.msg(MsgAddRegion, func(m Msg) { m.AddRegion().Encode(0, 4096) }, pipeFD(p.t))
		}, "unusable region"},
		{"unsealed region", func(p *rawPeer) {
			p.msg(MsgInit, goodInit)
			p.recv()
			p.msg(MsgAddRegion, func(m Msg) { m.AddRegion().Encode(0, 4096) }, memfd(p.t, 4096, false))
		}, "not sealed"},
		{"region larger than file", func(p *rawPeer) {
			p.msg(MsgInit, goodInit)
			p.recv()
			p.msg(MsgAddRegion, func(m Msg) { m.AddRegion().Encode(0, 1<<20) }, memfd(p.t, 4096, true))
		}, "4096 bytes for a 1048576-byte region"},
		{"region index skipped", func(p *rawPeer) {
			p.msg(MsgInit, goodInit)
			p.recv()
			p.msg(MsgAddRegion, func(m Msg) { m.AddRegion().Encode(1, 4096) }, memfd(p.t, 4096, true))
		}, "region index 1"},
		{"two descriptors", func(p *rawPeer) {
			p.msg(MsgInit, goodInit)
			p.recv()
			p.msg(MsgAddRegion, func(m Msg) { m.AddRegion().Encode(0, 4096) }, memfd(p.t, 4096, true), memfd(p.t, 4096, true))
		}, "2 descriptors"},
		{"ring with a pipe for interrupts", func(p *rawPeer) {
			region(p)
			p.msg(MsgAddRing, func(m Msg) { m.AddRing().Encode(&AddRingFields{Flags: AddRingC2S, Log2Size: 2}) }, pipeFD(p.t))
		}, "not an eventfd"},
		{"ring beyond region", func(p *rawPeer) {
			region(p)
			p.msg(MsgAddRing, func(m Msg) { m.AddRing().Encode(&AddRingFields{Offset: 4000, Log2Size: 2}) }, evfd(p.t))
		}, "does not fit"},
		{"ring too large", func(p *rawPeer) {
			region(p)
			p.msg(MsgAddRing, func(m Msg) { m.AddRing().Encode(&AddRingFields{Log2Size: 15}) }, evfd(p.t))
		}, "2^15"},
		{"ring in unknown region", func(p *rawPeer) {
			region(p)
			p.msg(MsgAddRing, func(m Msg) { m.AddRing().Encode(&AddRingFields{Region: 1, Log2Size: 2}) }, evfd(p.t))
		}, "region 1 of 1"},
		{"connect without rings", func(p *rawPeer) {
			region(p)
			p.msg(MsgConnect, nil)
		}, "without a C2S ring"},
		{"ring without cookie", func(p *rawPeer) {
			region(p)
			p.msg(MsgAddRing, func(m Msg) { m.AddRing().Encode(&AddRingFields{Flags: AddRingC2S, Log2Size: 2}) }, evfd(p.t))
			p.recv()
			p.msg(MsgAddRing, func(m Msg) { m.AddRing().Encode(&AddRingFields{Offset: 1024, Log2Size: 2}) }, evfd(p.t))
			p.recv()
			p.msg(MsgConnect, nil)
		}, "cookie"},
		{"client hangs up", func(p *rawPeer) { p.c.Close() }, "closed by peer"},
	}
	path := sockPath(t)
	ln, err := Listen(path, testSecret, Config{HandshakeTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errc := make(chan error, 1)
			go func() {
				l, err := ln.Accept()
				if l != nil {
					l.Close()
				}
				errc <- err
			}()
			conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			p := &rawPeer{t: t, c: conn}
			if typ, _ := p.recv(); typ != MsgHello {
				t.Fatalf("first message %v", typ)
			}
			c.run(p)
			err = <-errc
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Accept: %v, want an error mentioning %q", err, c.want)
			}
			if c.name == "client hangs up" {
				return
			}
			// Skip ACKs of earlier good steps; then the DISCONNECT.
			for {
				typ, reason := p.recv()
				if typ == MsgAck {
					continue
				}
				if typ != MsgDisconnect || !strings.Contains(reason, c.want) {
					t.Fatalf("client got %v %q", typ, reason)
				}
				break
			}
		})
	}
	// The listener still serves a well-behaved client.
	connectOnce(t, ln, path)
}

// connectOnce connects a client to ln at path and closes both ends.
func connectOnce(t *testing.T, ln *Listener, path string) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		l, err := ln.Accept()
		if l != nil {
			l.Close()
		}
		errc <- err
	}()
	l, err := Dial(path, testSecret, Config{})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// fakeServer accepts one connection and runs script on it.
func fakeServer(t *testing.T, script func(p *rawPeer)) string {
	path := sockPath(t)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer c.Close()
		script(&rawPeer{t: t, c: c})
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return path
}

func TestClientRejectsGarbage(t *testing.T) {
	hello := func(m Msg) {
		m.Hello().Encode(&HelloFields{MinVersion: Version, MaxVersion: Version, MaxLog2RingSize: 10})
	}
	cases := []struct {
		name   string
		script func(p *rawPeer)
		want   string
	}{
		{"short hello", func(p *rawPeer) { p.send(Msg("x")); p.recv() }, "1-byte message"},
		{"old server", func(p *rawPeer) {
			p.msg(MsgHello, func(m Msg) { m.Hello().Encode(&HelloFields{MinVersion: 0x100, MaxVersion: 0x100}) })
			p.recv()
		}, "versions 0x100-0x100"},
		{"ack instead of hello", func(p *rawPeer) { p.msg(MsgAck, nil); p.recv() }, "got ACK, want HELLO"},
		{"refused", func(p *rawPeer) {
			p.msg(MsgHello, hello)
			p.recv()
			p.msg(MsgDisconnect, func(m Msg) { m.Disconnect().Encode(0, "Incorrect secret") })
		}, "Incorrect secret"},
		{"hang up after init", func(p *rawPeer) { p.msg(MsgHello, hello); p.recv() }, "closed by peer"},
		{"connected early", func(p *rawPeer) {
			p.msg(MsgHello, hello)
			p.recv()
			p.msg(MsgConnected, nil)
			p.recv()
		}, "got CONNECTED, want ACK"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := fakeServer(t, c.script)
			l, err := Dial(path, testSecret, Config{HandshakeTimeout: 2 * time.Second})
			if l != nil {
				l.Close()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Dial: %v, want an error mentioning %q", err, c.want)
			}
		})
	}
}

func TestListenChecksDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(dir+"/s.sock", "", Config{}); err == nil || !strings.Contains(err.Error(), "0700") {
		t.Fatalf("Listen in a 0755 directory: %v", err)
	}
	path := sockPath(t)
	ln, err := Listen(path, "", Config{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, %v", st.Mode(), err)
	}
	ln.Close()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file left after Close: %v", err)
	}
	if _, err := Listen(path, strings.Repeat("x", SecretLen), Config{}); err == nil {
		t.Fatal("24-byte secret accepted")
	}
}

// FuzzServerHandshake feeds arbitrary bytes, cut into datagrams, to the
// server side of the handshake: it must end with an error or a link,
// never panic or hang.
func FuzzServerHandshake(f *testing.F) {
	m := make(Msg, MsgLen)
	m.Reset(MsgInit)
	goodInit(m)
	f.Add(append([]byte(nil), m...), uint8(128))
	f.Add([]byte{3, 0, 1}, uint8(3))
	f.Fuzz(func(t *testing.T, b []byte, cut uint8) {
		sc := fuzzPeer(t, b, cut)
		cfg, _ := (&Config{}).withDefaults()
		l, err := serverHandshake(&control{c: sc.(*net.UnixConn)}, testSecret, cfg, time.Now().Add(time.Second))
		if l != nil {
			l.Close()
		} else if err == nil {
			t.Fatal("no link and no error")
		}
	})
}

// TestAbstractSocket: a path starting with '@' is an abstract socket.
// Listening and connecting through it leaves no file (neither in the
// working directory, where a name taken for a relative path would land,
// nor anywhere the kernel reports a socket path), the kernel lists the
// socket as abstract, and after Close the name is free again at once (no
// stale file to remove).
func TestAbstractSocket(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	name := "@rsock-memif-test-" + strconv.Itoa(os.Getpid())
	for round := range 2 {
		ln, err := Listen(name, testSecret, Config{})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		connectOnce(t, ln, name)
		if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
			t.Errorf("round %d: the working directory holds %v (%v), want nothing", round, ents, err)
		}
		tbl, err := os.ReadFile("/proc/net/unix")
		if err != nil {
			t.Fatal(err)
		}
		var listed []string
		for _, line := range strings.Split(string(tbl), "\n") {
			if f := strings.Fields(line); len(f) == 8 && strings.HasSuffix(f[7], name[1:]) {
				listed = append(listed, f[7])
			}
		}
		// The listener, and none of them a path.
		if len(listed) == 0 || slices.ContainsFunc(listed, func(p string) bool { return p != name }) {
			t.Errorf("round %d: /proc/net/unix lists %q, want only the abstract %q", round, listed, name)
		}
		ln.Close()
	}
}

// FuzzClientHandshake plays a server sending arbitrary bytes, cut into
// datagrams, to the client side of the handshake.
func FuzzClientHandshake(f *testing.F) {
	m := make(Msg, MsgLen)
	m.Reset(MsgHello)
	m.Hello().Encode(&HelloFields{MinVersion: Version, MaxVersion: Version, MaxLog2RingSize: 4})
	ack := make(Msg, MsgLen)
	ack.Reset(MsgAck)
	seed := append(append([]byte(nil), m...), ack...)
	f.Add(seed, uint8(128))
	f.Add([]byte{2, 0}, uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, cut uint8) {
		cc := fuzzPeer(t, b, cut)
		cfg, _ := (&Config{Log2RingSize: 4}).withDefaults()
		l, err := clientHandshake(&control{c: cc.(*net.UnixConn)}, testSecret, cfg, time.Now().Add(time.Second))
		if l != nil {
			l.Close()
		} else if err == nil {
			t.Fatal("no link and no error")
		}
	})
}

// fuzzPeer returns one end of a seqpacket pair whose other end has sent b,
// cut into datagrams of cut bytes (at least 1), and shut down its writing
// side. The other end is nonblocking: a full socket buffer ends the input
// instead of blocking before the returned end reads.
func fuzzPeer(t *testing.T, b []byte, cut uint8) net.Conn {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ourFile, peerFile := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "peer")
	c, err := net.FileConn(ourFile)
	ourFile.Close()
	if err != nil {
		peerFile.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); peerFile.Close() })
	unix.SetNonblock(fds[1], true)
	step := max(int(cut), 1)
	for len(b) > 0 {
		n := min(step, len(b))
		if _, err := unix.Write(fds[1], b[:n]); err != nil {
			break
		}
		b = b[n:]
	}
	unix.Shutdown(fds[1], unix.SHUT_WR)
	return c
}
