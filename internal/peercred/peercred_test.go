//go:build linux

package peercred

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

const childEnv = "RSOCK_PEERCRED_TEST_CHILD"

// TestMain runs the child of the tests with childEnv set: it connects to
// the abstract Unix socket named there, says "connected", and holds the
// connection until its stdin closes.
func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		c, err := net.Dial("unix", name)
		if err != nil {
			os.Stdout.WriteString("child: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("connected\n")
		io.Copy(io.Discard, os.Stdin)
		c.Close()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// inodeOf returns the inode of a connection's socket.
func inodeOf(t *testing.T, c syscall.Conn) uint32 {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	var serr error
	rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) })
	if serr != nil {
		t.Fatal(serr)
	}
	return uint32(st.Ino)
}

// tcpPair connects a client to a listener on network/addr.
func tcpPair(t *testing.T, network, laddr, dial string) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen(network, laddr)
	if err != nil {
		t.Skipf("listen %s %s: %v", network, laddr, err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	c, err := net.Dial("tcp", net.JoinHostPort(dial, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// TestTCPPeerSocket: sock_diag finds the socket at the other end of a
// loopback TCP connection, from either end, over IPv4, IPv6 and a
// dual-stack listener with an IPv4 client: its inode is the peer
// socket's, and its owner is this process's uid.
func TestTCPPeerSocket(t *testing.T) {
	for _, tc := range []struct{ name, network, laddr, dial string }{
		{"ipv4", "tcp4", "127.0.0.1:0", "127.0.0.1"},
		{"ipv6", "tcp6", "[::1]:0", "::1"},
		{"dual-stack", "tcp", "[::]:0", "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := tcpPair(t, tc.network, tc.laddr, tc.dial)
			for _, end := range []struct{ from, to *net.TCPConn }{{c, s}, {s, c}} {
				got, err := TCPPeerSocket(end.from.LocalAddr().(*net.TCPAddr).AddrPort(), end.from.RemoteAddr().(*net.TCPAddr).AddrPort())
				if err != nil {
					t.Fatal(err)
				}
				if want := inodeOf(t, end.to); got.Inode != want || got.UID != uint32(os.Getuid()) {
					t.Errorf("from %v: socket %+v, want inode %d uid %d", end.from.LocalAddr(), got, want, os.Getuid())
				}
			}
		})
	}
}

// TestTCPPeerSocketNone: a connection that does not exist is an error,
// and the listening socket on the port is not taken for it.
func TestTCPPeerSocketNone(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	remote := ln.Addr().(*net.TCPAddr).AddrPort()
	s, err := TCPPeerSocket(netip.MustParseAddrPort("127.0.0.1:9"), remote)
	if err == nil {
		t.Fatalf("found %+v for a connection that does not exist", s)
	}
}

// unixPair returns both ends of a connection to an abstract Unix socket.
func unixListener(t *testing.T) *net.UnixListener {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: "@rsock-peercred-test-" + t.Name() + "-" + strconv.Itoa(os.Getpid()), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestExpectSameProcess: this process holds both ends of the TCP
// connection and of the Unix socket: Check passes from either side of the
// Unix socket, and Of reports this process.
func TestExpectSameProcess(t *testing.T) {
	c, _ := tcpPair(t, "tcp4", "127.0.0.1:0", "127.0.0.1")
	e, err := ExpectTCPPeer(c)
	if err != nil {
		t.Fatal(err)
	}
	ln := unixListener(t)
	uc, err := net.DialUnix("unix", nil, ln.Addr().(*net.UnixAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	us, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer us.Close()
	cred, err := Of(us)
	if err != nil || cred.PID != int32(os.Getpid()) || cred.UID != uint32(os.Getuid()) {
		t.Fatalf("Of: %+v, %v", cred, err)
	}
	for _, u := range []*net.UnixConn{uc, us} {
		if err := e.Check(u); err != nil {
			t.Error(err)
		}
	}
}

// TestExpectOtherProcess: a child process of the same user connects to
// the Unix socket; it does not hold the TCP peer's socket and is refused.
// Run as nobody, it is refused for its uid.
func TestExpectOtherProcess(t *testing.T) {
	for _, nobody := range []bool{false, true} {
		name := "same-uid"
		if nobody {
			name = "nobody"
		}
		t.Run(name, func(t *testing.T) {
			c, _ := tcpPair(t, "tcp4", "127.0.0.1:0", "127.0.0.1")
			e, err := ExpectTCPPeer(c)
			if err != nil {
				t.Fatal(err)
			}
			ln := unixListener(t)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+ln.Addr().String())
			if nobody {
				if os.Getuid() != 0 {
					t.Skip("running a child as nobody needs root")
				}
				cmd.Path = nobodyCopy(t)
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer stdin.Close()
			line, _ := bufio.NewReader(out).ReadString('\n')
			if line != "connected\n" {
				t.Fatalf("child: %q", line)
			}
			us, err := ln.AcceptUnix()
			if err != nil {
				t.Fatal(err)
			}
			defer us.Close()
			cred, err := Of(us)
			if err != nil || cred.PID != int32(cmd.Process.Pid) {
				t.Fatalf("Of: %+v, %v; child %d", cred, err, cmd.Process.Pid)
			}
			err = e.Check(us)
			if !errors.Is(err, ErrWrongPeer) {
				t.Fatalf("Check of the child: %v, want ErrWrongPeer", err)
			}
			want := "does not hold"
			if nobody {
				want = "uid 65534"
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Check of the child: %v, want it to say %q", err, want)
			}
		})
	}
}

// nobodyCopy copies the test binary where nobody may run it.
func nobodyCopy(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != "/" && d != filepath.Dir(os.TempDir()); d = filepath.Dir(d) {
		if d == os.TempDir() {
			break
		}
		os.Chmod(d, 0o755)
	}
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(dir, "child")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// FuzzParseDiagReply: any answer decodes to a socket or an error, never
// a panic; a socket only for a message that names the asked-for addresses.
func FuzzParseDiagReply(f *testing.F) {
	src := netip.MustParseAddrPort("127.0.0.1:40000")
	dst := netip.MustParseAddrPort("127.0.0.1:5000")
	ok := make([]byte, nlmsgHdrLen+inetDiagMsgLen)
	ne := binary.NativeEndian
	ne.PutUint32(ok[0:], uint32(len(ok)))
	ne.PutUint16(ok[4:], unix.SOCK_DIAG_BY_FAMILY)
	ok[nlmsgHdrLen] = unix.AF_INET
	putSockID(ok[nlmsgHdrLen+4:], unix.AF_INET, src, dst)
	ne.PutUint32(ok[nlmsgHdrLen+68:], 1234)
	f.Add(ok)
	e := make([]byte, nlmsgHdrLen+4)
	ne.PutUint32(e[0:], uint32(len(e)))
	ne.PutUint16(e[4:], unix.NLMSG_ERROR)
	ne.PutUint32(e[nlmsgHdrLen:], ^uint32(unix.ENOENT)+1)
	f.Add(e)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseDiagReply(b, src, dst)
		if err != nil {
			return
		}
		if len(b) < nlmsgHdrLen+inetDiagMsgLen {
			t.Fatalf("socket %+v from %d bytes", s, len(b))
		}
		var want [inetDiagSockID]byte
		putSockID(want[:], b[nlmsgHdrLen], src, dst)
		if string(b[nlmsgHdrLen+4:nlmsgHdrLen+40]) != string(want[:36]) {
			t.Fatalf("socket %+v from a message for other addresses", s)
		}
	})
}

// TestExpectNotAcceptedYet: until the peer accepts the TCP connection, its
// socket has no inode and no process holds it: Check refuses; once
// accepted, the same Expect passes.
func TestExpectNotAcceptedYet(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e, err := ExpectTCPPeer(c)
	if err != nil {
		t.Fatal(err)
	}
	ul := unixListener(t)
	uc, err := net.DialUnix("unix", nil, ul.Addr().(*net.UnixAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	if err := e.Check(uc); !errors.Is(err, ErrWrongPeer) {
		t.Fatalf("Check before accept: %v, want ErrWrongPeer", err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := e.Check(uc); err != nil {
		t.Fatalf("Check after accept: %v", err)
	}
}

// BenchmarkCheck: the cost of Check in a process holding about 5,000
// descriptors, for the TCP peer's socket opened last (the usual case).
func BenchmarkCheck(b *testing.B) {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for range 5000 {
		f, err := os.Open("/dev/null")
		if err != nil {
			b.Skip(err)
		}
		files = append(files, f)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e, _ := ExpectTCPPeer(c)
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: "@rsock-peercred-bench-" + strconv.Itoa(os.Getpid()), Net: "unix"})
	if err != nil {
		b.Fatal(err)
	}
	defer ul.Close()
	uc, err := net.DialUnix("unix", nil, ul.Addr().(*net.UnixAddr))
	if err != nil {
		b.Fatal(err)
	}
	defer uc.Close()
	for b.Loop() {
		if err := e.Check(uc); err != nil {
			b.Fatal(err)
		}
	}
}
