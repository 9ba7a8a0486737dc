package perftest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

type message struct {
	client bool
	b      []byte
}

// transcript reads testdata/ib_read_bw-exchange.hex.
func transcript(t testing.TB) []message {
	t.Helper()
	f, err := os.Open("testdata/ib_read_bw-exchange.hex")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var msgs []message
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		who, h, _ := strings.Cut(line, " ")
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		msgs = append(msgs, message{client: who == "client", b: b})
	}
	return msgs
}

func TestDestCaptured(t *testing.T) {
	msgs := transcript(t)
	// The fifth pair is the first address exchange.
	client, server := msgs[8], msgs[9]
	got, err := ParseDest(server.b)
	if err != nil {
		t.Fatal(err)
	}
	want := Dest{OutReads: 0x80, QPN: 0x2f, PSN: 0x1f25d2, RKey: 0x209e, VAddr: 0x5640826b5000,
		GID: verbs.GIDFromAddr(netip.MustParseAddr("10.99.0.11"))}
	if got != want {
		t.Errorf("perftest's address parsed as\n%+v, want\n%+v", got, want)
	}
	ours := Dest{OutReads: 0x10, QPN: 0x11, PSN: 0xaa5778, RKey: 0x0df1681e, VAddr: 0x7f9676eef000,
		GID: verbs.GIDFromAddr(netip.MustParseAddr("10.99.0.1"))}
	if m := ours.Marshal(); !bytes.Equal(m[:], client.b) {
		t.Errorf("Marshal:\n%q\nwant\n%q", m, client.b)
	}
}

func TestParseDestErrors(t *testing.T) {
	good := Dest{QPN: 1, GID: verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.1"))}.Marshal()
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good[:]...)) }
	for name, b := range map[string][]byte{
		"short":        good[:DestLen-1],
		"long":         append(good[:], 0),
		"no NUL":       mutate(func(b []byte) []byte { b[DestLen-1] = 'x'; return b }),
		"not hex":      mutate(func(b []byte) []byte { b[0] = 'g'; return b }),
		"empty field":  mutate(func(b []byte) []byte { copy(b, "0000::"); return b }),
		"QPN too wide": mutate(func(b []byte) []byte { copy(b[10:], "1000000:"); return b }),
		"GID byte 256": mutate(func(b []byte) []byte { copy(b[50:], "100"); return b }),
		"all NUL":      make([]byte, DestLen),
	} {
		if _, err := ParseDest(b); !errors.Is(err, ErrDest) {
			t.Errorf("%s: err %v, want ErrDest", name, err)
		}
	}
}

func FuzzParseDest(f *testing.F) {
	for _, m := range transcript(f) {
		f.Add(m.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDest(b)
		if err != nil {
			return
		}
		// Whatever parses marshals back to a message that parses the same.
		m := d.Marshal()
		d2, err := ParseDest(m[:])
		if err != nil || d2 != d {
			t.Fatalf("%q parsed as %+v; its marshaling %q as %+v, %v", b, d, m, d2, err)
		}
	})
}

// TestCapturedExchange plays perftest's server side of a captured
// ib_read_bw exchange to our client's control channel, in perftest's
// order, and checks every message our client sends against the capture
// (bytes where they are deterministic, lengths where they carry keys).
func TestCapturedExchange(t *testing.T) {
	msgs := transcript(t)
	ours, theirs := net.Pipe()
	defer ours.Close()
	errc := make(chan error, 1)
	go func() {
		defer theirs.Close()
		for i, m := range msgs {
			if !m.client {
				// The last message is perftest's "done", which nobody reads.
				if _, err := theirs.Write(m.b); err != nil && i != len(msgs)-1 {
					errc <- err
					return
				}
				continue
			}
			got := make([]byte, len(m.b))
			if _, err := io.ReadFull(theirs, got); err != nil {
				errc <- err
				return
			}
			deterministic := len(m.b) != DestLen && len(m.b) != 8
			if deterministic && !bytes.Equal(got, m.b) {
				errc <- fmt.Errorf("message %d: got %x, want %x", i, got, m.b)
				return
			}
		}
		errc <- nil
	}()
	c := &comm{conn: ours, client: true, timeout: 5 * time.Second, ctx: context.Background()}
	ver, err := c.versions()
	if err != nil || ver != "6.06" {
		t.Fatalf("versions: %q, %v", ver, err)
	}
	cycle, line, err := c.sysData(pageSize, cacheLineSize)
	if err != nil || cycle != 4096 || line != 64 {
		t.Fatalf("sysData: %d %d %v", cycle, line, err)
	}
	if mtu, err := c.mtu(verbs.MTU1024); err != nil || mtu != verbs.MTU1024 {
		t.Fatalf("mtu: %v %v", mtu, err)
	}
	me := Dest{OutReads: 16, QPN: 0x11, PSN: 0xaa5778, RKey: 1, VAddr: 1 << 40, GID: verbs.GIDFromAddr(netip.MustParseAddr("10.99.0.1"))}
	for i := range 4 {
		rem, err := c.handShake(me)
		if err != nil || rem.QPN != 0x2f {
			t.Fatalf("handshake %d: %+v %v", i, rem, err)
		}
	}
	if _, err := c.bwReports(newBWReport(4096, 10, time.Second)); err != nil {
		t.Fatalf("reports: %v", err)
	}
	if err := c.close(me); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestExchangeGarbage: a client that sends an old version, an absurd
// buffer geometry, or hangs up mid-exchange gets a clear error from our
// server, which sets nothing up for it.
func TestExchangeGarbage(t *testing.T) {
	version := func(v string) []byte { b := make([]byte, versionLen); copy(b, v); return b }
	be32 := func(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }
	for name, tc := range map[string]struct {
		send [][]byte
		want string
	}{
		"old version":   {[][]byte{version("5.60")}, "peer version not supported"},
		"not a version": {[][]byte{version("hello")}, "peer version not supported"},
		"huge cycle":    {[][]byte{version("6.06"), be32(1 << 30), be32(64)}, "out of range"},
		// A negative size loses to ours, as in perftest: the exchange goes on.
		"negative cycle":    {[][]byte{version("6.06"), be32(0xffffff00), be32(64)}, "receive MTU"},
		"huge cache line":   {[][]byte{version("6.06"), be32(4096), be32(1 << 20)}, "out of range"},
		"hang up":           {[][]byte{version("6.06"), be32(4096)}, "receive cache line size"},
		"address too short": {[][]byte{version("6.06"), be32(4096), be32(64), []byte("3\x00"), []byte("0000:")}, "receive address"},
	} {
		t.Run(name, func(t *testing.T) {
			ours, theirs := net.Pipe()
			go func() {
				defer theirs.Close()
				buf := make([]byte, DestLen)
				for i, m := range tc.send {
					if _, err := theirs.Write(m); err != nil {
						return
					}
					// Our server answers each whole message; read the
					// answer. A short last message gets none.
					if i < len(tc.send)-1 || !strings.Contains(tc.want, "address") {
						if _, err := theirs.Read(buf); err != nil {
							return
						}
					}
				}
			}()
			cfg := Config{Test: WriteBW, Timeout: 5 * time.Second, RoCE: netip.MustParseAddrPort("127.0.0.1:0")}
			res, err := Server(context.Background(), ours, cfg)
			ours.Close()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one about %q", err, tc.want)
			}
			// Only the address exchange comes after the queue pair is made.
			if res != nil && res.Local.QPN != 0 && !strings.Contains(tc.want, "address") {
				t.Errorf("a queue pair was set up: %+v", res.Local)
			}
		})
	}
}
