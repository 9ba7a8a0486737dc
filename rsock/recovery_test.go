//go:build linux

package rsock

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/rsock-go/rsock/internal/verbstest"
)

// TestRecoveryFor: each loss-recovery feature is used only when both
// sides offer it, the extensions of selective repeat (congestion
// control, wide SACK) only with it, and ECN, duplicate and hold echoes
// only with congestion control.
func TestRecoveryFor(t *testing.T) {
	all := Params{SelectiveRepeat: true, CongestionControl: true, WideSACK: true}
	withECN := all
	withECN.ECN = true
	withDup := all
	withDup.DuplicateEcho = true
	withHold := all
	withHold.HoldEcho = true
	for _, tc := range []struct {
		name        string
		local, peer Params
		want        recovery
	}{
		{"both offer all", all, all, recovery{selective: true, congestion: true, wideSACK: true}},
		{"old peer: no wide SACK", all, Params{SelectiveRepeat: true, CongestionControl: true},
			recovery{selective: true, congestion: true}},
		{"local without wide SACK", Params{SelectiveRepeat: true, CongestionControl: true}, all,
			recovery{selective: true, congestion: true}},
		{"peer with selective repeat only", all, Params{SelectiveRepeat: true}, recovery{selective: true}},
		{"wide SACK without congestion control", Params{SelectiveRepeat: true, WideSACK: true}, all,
			recovery{selective: true, wideSACK: true}},
		{"peer go-back-N", all, Params{}, recovery{}},
		{"peer offers extensions without selective repeat", all, Params{CongestionControl: true, WideSACK: true}, recovery{}},
		{"local go-back-N", Params{}, all, recovery{}},
		{"both offer ECN", withECN, withECN, recovery{selective: true, congestion: true, wideSACK: true, ecn: true}},
		{"peer without ECN", withECN, all, recovery{selective: true, congestion: true, wideSACK: true}},
		{"local without ECN", all, withECN, recovery{selective: true, congestion: true, wideSACK: true}},
		{"ECN without congestion control at the peer", withECN, Params{SelectiveRepeat: true, ECN: true},
			recovery{selective: true}},
		{"ECN with a go-back-N peer", withECN, Params{CongestionControl: true, ECN: true}, recovery{}},
		{"both echo duplicates", withDup, withDup, recovery{selective: true, congestion: true, wideSACK: true, dupEcho: true}},
		{"old peer: no duplicate echoes", withDup, all, recovery{selective: true, congestion: true, wideSACK: true}},
		{"duplicate echoes without congestion control at the peer", withDup,
			Params{SelectiveRepeat: true, DuplicateEcho: true}, recovery{selective: true}},
		{"both echo holds", withHold, withHold, recovery{selective: true, congestion: true, wideSACK: true, holdEcho: true}},
		{"old peer: no hold echoes", withHold, all, recovery{selective: true, congestion: true, wideSACK: true}},
		{"hold echoes without congestion control at the peer", withHold,
			Params{SelectiveRepeat: true, HoldEcho: true}, recovery{selective: true}},
	} {
		if got := recoveryFor(tc.local, tc.peer); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestRingWindow: the packets a ring can have in flight: its bytes in
// full packets, and a partial packet for each of two WRITEs per message.
func TestRingWindow(t *testing.T) {
	for _, tc := range []struct{ ring, mtu, depth, want int }{
		{512 << 10, 1024, 64, 640},
		{4 << 20, 1024, 64, 4224},
		{512 << 10, 4096, 64, 256},
		{4<<10 + 1, 1024, 8, 21},
	} {
		if got := ringWindow(tc.ring, tc.mtu, tc.depth); got != tc.want {
			t.Errorf("ringWindow(%d, %d, %d) = %d, want %d", tc.ring, tc.mtu, tc.depth, got, tc.want)
		}
	}
}

// TestWideSACKNegotiated: over soft-RoCE at a 1024-byte MTU, a stream
// between two endpoints that offer wide SACK sends up to 2048 packets
// ahead, bounded by what the peer's ring can have in flight; one with a
// peer that does not (an older rsock) keeps today's 512 whatever the
// ring; either way every byte arrives.
func TestWideSACKNegotiated(t *testing.T) {
	a, b := devPair(t)
	for _, tc := range []struct {
		name     string
		ring     int
		peerWide bool
		window   int
	}{
		{"both, 4 MiB ring", 4 << 20, true, 2048},
		{"both, default ring", 0, true, 640},
		{"both, 64 KiB ring", 64 << 10, true, 192},
		{"old peer, 4 MiB ring", 4 << 20, false, 512},
		{"old peer, 64 KiB ring", 64 << 10, false, 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{MaxMTU: 1024, RingSize: tc.ring, NoCongestionControl: true}
			ea, err := NewEndpoint(a.dev, cfg)
			if err != nil {
				t.Fatal(err)
			}
			eb, err := NewEndpoint(b.dev, cfg)
			if err != nil {
				t.Fatal(err)
			}
			pa, pb := ea.Params(), eb.Params()
			if !pa.WideSACK || !pb.WideSACK {
				t.Fatal("a soft-RoCE endpoint does not offer wide SACK")
			}
			pa.WideSACK, pb.WideSACK = tc.peerWide, tc.peerWide // what each sees of the other
			addrA := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
			addrB := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2}
			sa, err := ea.Connect(pb, ConnectOptions{Net: "tcp", LocalAddr: addrA, RemoteAddr: addrB})
			if err != nil {
				t.Fatal(err)
			}
			defer sa.Close()
			sb, err := eb.Connect(pa, ConnectOptions{Net: "tcp", LocalAddr: addrB, RemoteAddr: addrA})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close()
			if got := sa.Stats().QP.Cwnd; got != tc.window {
				t.Errorf("send window %d packets, want %d", got, tc.window)
			}
			data := make([]byte, 16<<20)
			verbstest.FillRandom(rand.New(rand.NewPCG(7, 8)), data)
			errc := make(chan error, 1)
			go func() {
				_, err := sa.Write(data)
				errc <- err
			}()
			got := make([]byte, len(data))
			most := 0
			for off := 0; off < len(got); {
				n, err := io.ReadAtLeast(sb, got[off:], 1)
				if err != nil {
					t.Fatal(err)
				}
				off += n
				if st := sa.Stats().QP; st.Inflight > most {
					most = st.Inflight
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatal("data differs")
			}
			t.Logf("most packets in flight seen: %d", most)
			if w := sa.Stats().QP.Cwnd; w > tc.window {
				t.Errorf("send window grew to %d packets, beyond %d", w, tc.window)
			}
			if !tc.peerWide && most >= 1024 {
				t.Errorf("%d packets in flight toward a peer without wide SACK", most)
			}
		})
	}
}

// TestPacketMTUNegotiated: where both endpoints offer a packet MTU, the
// stream's packets carry the smaller of the two (fewer packets per byte,
// the data intact); where either offers none, or offers no more than the
// path MTU, they carry the path MTU's.
func TestPacketMTUNegotiated(t *testing.T) {
	a, b := devPair(t)
	for _, tc := range []struct {
		name    string
		pa, pb  int // each side's MaxPacketMTU
		offered int // a's Params.PacketMTU
		want    int // QPStats.PacketMTU
	}{
		{"both 1408", 1408, 1408, 1408, 1408},
		{"1408 and 1280", 1408, 1280, 1408, 1280},
		{"a peer offering more than our route carries", 1408, 4096, 1408, 1408},
		{"one side", 1408, 0, 1408, 0},
		{"no more than the path MTU", 1024, 1024, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ea, err := NewEndpoint(a.dev, Config{MaxMTU: 1024, MaxPacketMTU: tc.pa})
			if err != nil {
				t.Fatal(err)
			}
			eb, err := NewEndpoint(b.dev, Config{MaxMTU: 1024, MaxPacketMTU: tc.pb})
			if err != nil {
				t.Fatal(err)
			}
			if got := ea.Params().PacketMTU; got != tc.offered {
				t.Fatalf("endpoint offers packet MTU %d, want %d", got, tc.offered)
			}
			sa, sb := connectEndpoints(t, ea, eb)
			defer sa.Close()
			defer sb.Close()
			for _, s := range []*Stream{sa, sb} {
				if st := s.Stats().QP; st.PacketMTU != tc.want || st.PathMTU != 1024 {
					t.Fatalf("packet MTU %d, path MTU %d; want %d, 1024", st.PacketMTU, st.PathMTU, tc.want)
				}
			}
			before := a.dev.Counters()
			const n = 4 << 20
			sendVerified(t, sa, sb, n, 9)
			// Every packet but a write's last is full; control messages
			// add a few. Resends (a loaded host under -race) are not
			// counted.
			payload := max(tc.want, 1024)
			least := uint64(n / payload)
			after := a.dev.Counters()
			sent := (after.SentPackets - before.SentPackets) - (after.Retransmits - before.Retransmits)
			if sent < least || sent > least+least/8 {
				t.Errorf("4 MiB took %d packets besides resends, want %d to %d (%d bytes each)", sent, least, least+least/8, payload)
			}
		})
	}
}
