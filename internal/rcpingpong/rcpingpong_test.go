package rcpingpong

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

// freeUDPPort returns a UDP port on 127.0.0.1 that was free a moment ago.
func freeUDPPort(t *testing.T) uint16 {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Port()
}

// pair runs our client against our server over loopback TCP and UDP.
func pair(t *testing.T, cfg Config) (cli, srv *Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lo := netip.MustParseAddr("127.0.0.1")
	sp, cp := freeUDPPort(t), freeUDPPort(t)
	for sp == cp {
		cp = freeUDPPort(t)
	}
	scfg, ccfg := cfg, cfg
	scfg.RoCE, scfg.PeerRoCEPort = netip.AddrPortFrom(lo, sp), cp
	ccfg.RoCE, ccfg.PeerRoCEPort = netip.AddrPortFrom(lo, cp), sp
	type out struct {
		r   *Result
		err error
	}
	sc := make(chan out, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			sc <- out{nil, err}
			return
		}
		defer conn.Close()
		r, err := Server(ctx, conn, scfg)
		sc <- out{r, err}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cli, cerr := Client(ctx, conn, ccfg)
	so := <-sc
	if cerr != nil {
		t.Fatalf("client: %v", cerr)
	}
	if so.err != nil {
		t.Fatalf("server: %v", so.err)
	}
	return cli, so.r
}

func TestPingPongLoopback(t *testing.T) {
	for _, mtu := range []int{1024, 4096} {
		for _, size := range []int{1, 100, 1024, 1025, 4096, 4097, 65536} {
			t.Run(fmt.Sprintf("mtu%d/size%d", mtu, size), func(t *testing.T) {
				iters := 50
				if testing.Short() {
					iters = 5
				}
				cli, srv := pair(t, Config{Size: size, MTU: mtu, Iters: iters, RxDepth: 16, Timeout: 20 * time.Second, Linger: 20 * time.Millisecond})
				want := int64(size) * int64(iters) * 2
				for _, r := range []*Result{cli, srv} {
					if r.Bytes != want || r.Sends != iters || r.Recvs != iters {
						t.Errorf("bytes %d sends %d recvs %d, want %d, %d, %d", r.Bytes, r.Sends, r.Recvs, want, iters, iters)
					}
				}
				if cli.Remote != srv.Local || srv.Remote != cli.Local {
					t.Errorf("addresses: client %v / %v, server %v / %v", cli.Local, cli.Remote, srv.Local, srv.Remote)
				}
				if !strings.Contains(cli.Summary(), fmt.Sprintf("%d bytes in ", want)) {
					t.Errorf("summary %q", cli.Summary())
				}
			})
		}
	}
}

func TestMarshalFormat(t *testing.T) {
	d := Dest{LID: 0, QPN: 0x13, PSN: 0x17be8d, GID: verbs.GIDFromAddr(netip.MustParseAddr("10.99.0.11"))}
	m := d.Marshal()
	want := "0000:000013:17be8d:00000000000000000000ffff0a63000b\x00"
	if string(m[:]) != want || len(m) != 52 {
		t.Fatalf("got %q (%d bytes), want %q", m[:], len(m), want)
	}
	got, err := ParseDest(m[:])
	if err != nil || got != d {
		t.Fatalf("parse: %v, %v", got, err)
	}
	up := bytes.ToUpper(m[:])
	if got, err := ParseDest(up); err != nil || got != d {
		t.Fatalf("uppercase parse: %v, %v", got, err)
	}
}

func TestParseRejects(t *testing.T) {
	good := Dest{QPN: 1, PSN: 2, GID: verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.1"))}.Marshal()
	bad := map[string][]byte{
		"short":     good[:51],
		"long":      append(good[:], 0),
		"noNUL":     append(append([]byte(nil), good[:51]...), 'x'),
		"colon":     []byte(strings.Replace(string(good[:]), ":", "-", 1)),
		"nonhexLID": append([]byte("000g"), good[4:]...),
		"nonhexGID": append(append([]byte(nil), good[:19]...), append([]byte("z"), good[20:]...)...),
		"empty":     nil,
		"spaces":    []byte(strings.Repeat(" ", 52)),
	}
	for name, b := range bad {
		if d, err := ParseDest(b); err == nil {
			t.Errorf("%s: parsed %v", name, d)
		}
	}
}

func FuzzParseDest(f *testing.F) {
	good := Dest{QPN: 0x11, PSN: 0xabcdef, GID: verbs.GIDFromAddr(netip.MustParseAddr("10.99.0.1"))}.Marshal()
	f.Add(good[:])
	f.Add([]byte("0000:000013:17be8d:00000000000000000000ffff0a63000b\x00"))
	f.Add([]byte("done\x00"))
	f.Add(make([]byte, 52))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDest(b)
		if err != nil {
			return
		}
		if len(b) != MsgLen {
			t.Fatalf("accepted %d bytes", len(b))
		}
		m := d.Marshal()
		if !bytes.EqualFold(m[:], b) {
			t.Fatalf("round trip: %q -> %v -> %q", b, d, m[:])
		}
	})
}
