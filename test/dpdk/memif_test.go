//go:build dpdk

package dpdk

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rsock-go/rsock/netconn"
	"github.com/rsock-go/rsock/verbs/softroce/link/dpdk"
)

// childEnv marks the test binary run as a child of a test: "echo" (the
// echo server) or "dial" (the client of dialClient).
const childEnv = "RSOCK_DPDK_TEST_CHILD"

// childAddrEnv is the address the echo server listens on (loopback by
// default) or the client dials.
const childAddrEnv = "RSOCK_DPDK_TEST_ADDR"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "echo":
		os.Exit(echoServer())
	case "dial":
		os.Exit(dialClient())
	}
	// netconn keeps an idle device open for a few seconds after its last
	// connection closes, for the next one: its receive loop, fine clock and linger
	// timer are not leaks.
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce.(*receiver).loop"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce.(*fineClock).run"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce/internal/timerfd.(*Timer).wait"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/netconn.releaseDevice.func1"),
		// An shm channel outlives its last connection for a few seconds,
		// for the next one between the same two processes.
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/shm.(*Device).watch"),
	)
}

// echoServer listens with netconn, prints its address, and echoes one
// connection's bytes back; it reports the connection's transport on
// stderr.
func echoServer() int {
	addr := os.Getenv(childAddrEnv)
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	// The dialer's preface comes after its DPDK environment started.
	lc := netconn.ListenConfig{SniffTimeout: 5 * time.Second}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ln.Close()
	fmt.Printf("addr %s\n", ln.Addr())
	c, err := ln.Accept()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "transport %s\n", c.(*netconn.Conn).Transport())
	_, err = io.Copy(c, c)
	c.Close()
	ln.Close()
	netconn.CloseIdleDevices()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// dpdkEnv is the environment of one process on a net_memif port.
func dpdkEnv(role, socket, ip string) []string {
	return []string{
		netconn.EnvLink + "=dpdk",
		dpdk.EnvArgs + "=--no-huge -m 256 --no-pci --no-telemetry --log-level=lib.eal:warning",
		dpdk.EnvPort + "=net_memif0,role=" + role + ",socket=" + socket + ",socket-abstract=no",
		dpdk.EnvIP + "=" + ip,
	}
}

// TestMemifStream runs a netconn stream between this process and a child
// joined by net_memif, checks the bytes
// and the transport, and that neither process leaves DPDK runtime files
// or the memif socket behind.
func TestMemifStream(t *testing.T) {
	// The dialer opens its device first, before the handshake; so it is
	// the memif server, and the listener's device connects to it.
	dir := t.TempDir()
	socket := filepath.Join(dir, "memif.sock")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(exe, "-test.run=^$")
	child.Env = append(append(os.Environ(), childEnv+"=echo"), dpdkEnv("client", socket, "10.77.0.1/24")...)
	addr, childErr := startEcho(t, child)
	for _, kv := range dpdkEnv("server", socket, "10.77.0.2/24") {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	c, err := netconn.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("%v; child: %s", err, childErr.String())
	}
	conn := c.(*netconn.Conn)
	if tr := conn.Transport(); tr != "rdma/softroce/dpdk" {
		c.Close()
		t.Fatalf("transport %q (%s); child: %s", tr, conn.FallbackReason(), childErr.String())
	}
	if err := echoRoundTrip(c, streamLen); err != nil {
		t.Fatal(err)
	}
	c.Close()
	netconn.CloseIdleDevices()
	if err := child.Wait(); err != nil {
		t.Fatalf("child: %v; stderr: %s", err, childErr.String())
	}
	if !strings.Contains(childErr.String(), "transport rdma/softroce/dpdk") {
		t.Fatalf("child: %s", childErr.String())
	}
	for _, pid := range []int{os.Getpid(), child.Process.Pid} {
		if _, err := os.Stat(fmt.Sprintf("/var/run/dpdk/rsock-%d", pid)); err == nil {
			t.Errorf("runtime directory of %d left behind", pid)
		}
	}
	if _, err := os.Stat(socket); err == nil {
		t.Error("memif socket left behind")
	}
	var _ net.Conn = c
}

// startEcho starts cmd, an echo server child, and returns the address it
// listens on and its stderr; the test's end kills and reaps it.
func startEcho(t *testing.T, cmd *exec.Cmd) (string, *bytes.Buffer) {
	t.Helper()
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "addr ")
	if err != nil || !ok {
		t.Fatalf("echo server said %q (%v); stderr: %s", line, err, stderr.String())
	}
	return addr, stderr
}
