//go:build linux

package hostile

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/streambench"
	"github.com/rsock-go/rsock/rsock"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Forgeries aimed at the right PSNs, which an attacker on the path (or
// one that guessed them) has: the sniffer reads them off the wire.

// modes are the two loss-recovery modes of a stream.
var modes = []struct {
	name    string
	goBackN bool
}{{"selective", false}, {"go-back-N", true}}

// quietConfig is a stream without keep-alives, so that an idle stream
// sends nothing and its PSNs stand still.
func quietConfig(goBackN bool) rsock.Config { return rsock.Config{GoBackN: goBackN, KeepAlive: -1} }

// forgeRequest builds a request to qpn at psn: op, a RETH (va, rkey,
// dmaLen) and an immediate if op has them, and payload.
func forgeRequest(op wire.Opcode, qpn, psn uint32, va uint64, rkey, dmaLen, imm uint32, payload []byte) []byte {
	b := make([]byte, op.HeaderLen()+len(payload))
	wire.BTH(b).Encode(&wire.BTHFields{Opcode: op, MigReq: true, PKey: wire.DefaultPKey, DestQP: qpn, AckReq: true, PSN: psn & wire.PSNMask})
	h := wire.BTHLen
	if op.Flags().Has(wire.FlagRETH) {
		wire.RETH(b[h:]).Encode(va, rkey, dmaLen)
		h += wire.RETHLen
	}
	if op.Flags().Has(wire.FlagImm) {
		wire.ImmDt(b[h:]).Set(imm)
		h += wire.ImmDtLen
	}
	copy(b[h:], payload)
	return b
}

// forgeAck builds an acknowledgement to qpn at psn with syndrome syn.
func forgeAck(qpn, psn uint32, syn wire.Syndrome) []byte {
	b := make([]byte, wire.BTHLen+wire.AETHLen)
	wire.BTH(b).Encode(&wire.BTHFields{Opcode: wire.RCAcknowledge, MigReq: true, PKey: wire.DefaultPKey, DestQP: qpn, PSN: psn & wire.PSNMask})
	wire.AETH(b[wire.BTHLen:]).Encode(syn, 0)
	return b
}

// warmUp sends n pattern bytes from w to r and checks them, so that the
// stream has run and its PSNs are past the initial ones.
func warmUp(t *testing.T, w, r *rsock.Stream, wp, rp *streambench.Pattern, n int) {
	t.Helper()
	buf := make([]byte, n)
	wp.Fill(buf)
	if _, err := w.Write(buf); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatal(err)
	}
	if off, g, want, ok := rp.Check(got); !ok {
		t.Fatalf("warm-up byte %d is %#x, want %#x", off, g, want)
	}
}

// TestZeroLengthWriteNeverCorrupts: zero-length WRITEs, which carry no key
// that is checked (IBA C9-88), forged at the PSNs the receiving queue pair
// expects next, as from the writer. Before, each took its PSN, the
// writer's real packet there was dropped as a duplicate, and the reader
// got stale ring bytes with no error; a zero-length WRITE with immediate
// announced bytes that never came. Now the reader gets the writer's bytes
// or an error, never other bytes.
func TestZeroLengthWriteNeverCorrupts(t *testing.T) {
	forgeries := []struct {
		name string
		pkts func(qpn, epsn uint32) [][]byte
	}{
		{"WRITE ONLY at the next eight PSNs", func(qpn, epsn uint32) [][]byte {
			var ps [][]byte
			for i := range uint32(8) {
				ps = append(ps, forgeRequest(wire.RCWriteOnly, qpn, epsn+i, 0xdead0000, 0xbad, 0, 0, nil))
			}
			return ps
		}},
		{"WRITE ONLY two PSNs ahead", func(qpn, epsn uint32) [][]byte {
			return [][]byte{forgeRequest(wire.RCWriteOnly, qpn, epsn+2, 0, 0, 0, 0, nil)}
		}},
		{"WRITE ONLY with immediate announcing 100 bytes", func(qpn, epsn uint32) [][]byte {
			const dataImm100 = 1<<29 | 100 // rsock's data immediate for 100 bytes
			return [][]byte{forgeRequest(wire.RCWriteOnlyImm, qpn, epsn, 0, 0, 0, dataImm100, nil)}
		}},
	}
	for _, m := range modes {
		for _, fg := range forgeries {
			t.Run(m.name+"/"+fg.name, func(t *testing.T) {
				a, b := newSides(t, quietConfig(m.goBackN), true)
				sa, sb := connect(t, a, b)
				defer sb.Close()
				defer sa.Close()
				sn := sniff(t, b, b.params.QPN)
				wp, rp := streambench.NewPattern(7, 0), streambench.NewPattern(7, 0)
				warmUp(t, sa, sb, wp, rp, 3000)
				epsn := sn.quiet(t, 30*time.Millisecond) + 1
				if err := a.raw.sendAll(a.link, b.link, fg.pkts(b.params.QPN, epsn), true, 0); err != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond)
				// The writer's next messages, 100 bytes each: each is one
				// packet, at the PSNs the forgeries aimed at.
				var werr error
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					msg := make([]byte, 100)
					for range 16 {
						wp.Fill(msg)
						if _, werr = sa.Write(msg); werr != nil {
							return
						}
						time.Sleep(2 * time.Millisecond)
					}
				}()
				sb.SetReadDeadline(time.Now().Add(5 * time.Second))
				got := make([]byte, 1600)
				n, rerr := io.ReadFull(sb, got)
				wg.Wait()
				if off, g, want, ok := rp.Check(got[:n]); !ok {
					t.Fatalf("the reader got wrong bytes: byte %d is %#x, want %#x (read error: %v)", off, g, want, rerr)
				}
				if rerr != nil && errors.Is(rerr, errTimeout) {
					t.Fatalf("the reader got %d of 1600 bytes and then nothing: %v", n, rerr)
				}
				t.Logf("reader: %d bytes, all right; read error %v; write error %v; counters %+v", n, rerr, werr, b.dev.Counters())
			})
		}
	}
}

// errTimeout matches a deadline error.
var errTimeout = errDeadline{}

type errDeadline struct{}

func (errDeadline) Error() string { return "deadline" }
func (errDeadline) Is(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// TestForeignRKeyWrite: a WRITE, as from the stream's peer, naming the
// rkey and address of a region in another protection domain on the same
// device (the canary, as another connection's ring is: every endpoint has
// its own PD). Before, one PD served every connection of a device, so a
// peer that guessed another connection's rkey wrote into its ring, and
// with selective repeat a wrong guess was left for its turn, never failing
// anything. Now nothing is written and the queue pair that took it fails.
func TestForeignRKeyWrite(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			a, b := newSides(t, quietConfig(m.goBackN), true)
			sa, sb := connect(t, a, b)
			defer sb.Close()
			defer sa.Close()
			sn := sniff(t, b, b.params.QPN)
			wp, rp := streambench.NewPattern(9, 0), streambench.NewPattern(9, 0)
			warmUp(t, sa, sb, wp, rp, 3000)
			psn := sn.quiet(t, 30*time.Millisecond) + 1
			if !m.goBackN {
				psn++ // past a gap: placed at once, or not
			}
			payload := make([]byte, 64)
			for i := range payload {
				payload[i] = 0xee
			}
			va, rkey := b.canaryMR.Addr()+128, b.canaryMR.RKey()
			pkt := forgeRequest(wire.RCWriteOnly, b.params.QPN, psn, va, rkey, 64, 0, payload)
			if err := a.raw.send(a.link, b.link, pkt, true); err != nil {
				t.Fatal(err)
			}
			sb.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err := sb.Read(make([]byte, 10))
			b.checkCanary(t)
			if err == nil || errors.Is(err, errTimeout) || err == io.EOF {
				t.Fatalf("the stream that took a WRITE with another PD's rkey did not fail: %v", err)
			}
			if c := b.dev.Counters(); c.AccessErrors != 1 {
				t.Errorf("AccessErrors %d, want 1", c.AccessErrors)
			}
			t.Logf("the reader's stream failed: %v", err)
		})
	}
}

// paceFlow writes a pattern from w to r in 32 KiB writes until stop is
// closed, and counts the bytes r received and checked.
type paceFlow struct {
	got   atomic.Int64
	wrong error // a byte that is not the writer's
	err   error // the stream failed
	done  chan struct{}
}

func startPaceFlow(w, r *rsock.Stream, seed uint64, stop <-chan struct{}) *paceFlow {
	f := &paceFlow{done: make(chan struct{})}
	var werr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p := streambench.NewPattern(seed, 0)
		buf := make([]byte, 32<<10)
		for {
			select {
			case <-stop:
				werr = w.CloseWrite()
				return
			default:
			}
			p.Fill(buf)
			if _, err := w.Write(buf); err != nil {
				werr = err
				return
			}
		}
	}()
	go func() {
		defer close(f.done)
		p := streambench.NewPattern(seed, 0)
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Read(buf)
			if off, g, want, ok := p.Check(buf[:n]); !ok {
				f.wrong = fmt.Errorf("byte %d is %#x, want %#x", off, g, want)
				break
			}
			f.got.Add(int64(n))
			if err == io.EOF {
				break
			}
			if err != nil {
				f.err = err
				break
			}
		}
		wg.Wait()
		f.err = errors.Join(f.err, werr)
	}()
	return f
}

// flood sends pkt(), from src to dst, as fast as the raw socket takes
// them, until d has passed.
func flood(t *testing.T, raw *rawSender, src, dst netip.AddrPort, d time.Duration, pkt func() []byte) int {
	end := time.Now().Add(d)
	n := 0
	for time.Now().Before(end) {
		if err := raw.send(src, dst, pkt(), true); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// TestForgedRNRNAKFlood: RNR NAKs forged as from the reader, at the PSNs
// of data packets the writer just sent (which need no receive WQE), as
// fast as a raw socket sends them, for two seconds, with the longest RNR
// timer (655 ms). Before, each one that named an outstanding PSN paused
// the writer for 655 ms and the next one extended the pause (the stream
// crawled). Now none is acted on: the writer counts as received only the
// RNR NAKs the reader really sent, and drops the rest as unexpected.
func TestForgedRNRNAKFlood(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			a, b := newSides(t, quietConfig(m.goBackN), true)
			sa, sb := connect(t, a, b)
			defer sb.Close()
			defer sa.Close()
			sn := sniff(t, b, b.params.QPN)
			stop := make(chan struct{})
			f := startPaceFlow(sa, sb, 3, stop)
			time.Sleep(200 * time.Millisecond)
			before := f.got.Load()
			sent := flood(t, b.raw, b.link, a.link, 2*time.Second, func() []byte {
				return forgeAck(a.params.QPN, sn.newestData(), wire.RNRSyndrome(0))
			})
			moved := f.got.Load() - before
			close(stop)
			<-f.done
			ca, cb := a.dev.Counters(), b.dev.Counters()
			t.Logf("%d forged RNR NAKs in 2 s (the stream moved %d bytes meanwhile); writer counters %+v", sent, moved, ca)
			if f.wrong != nil || f.err != nil {
				t.Fatalf("flow: %v", errors.Join(f.wrong, f.err))
			}
			if ca.RNRNAKsRecv > cb.RNRNAKsSent {
				t.Fatalf("the writer acted on %d RNR NAKs; the reader sent %d", ca.RNRNAKsRecv, cb.RNRNAKsSent)
			}
			if ca.UnexpectedResponses == 0 {
				t.Fatal("no forged RNR NAK reached the writer")
			}
		})
	}
}

// TestForgedSequenceNAKFlood: sequence NAKs forged as from the reader,
// alternating between two PSNs behind the newest the writer sent (4 and
// 64 behind), as fast as a raw socket sends them, for two seconds. Before,
// each one that moved the acknowledged PSN on made the writer send
// everything after its PSN again (the rewind check remembered one PSN
// only): a selective-repeat writer resent most of what it sent. Now a
// selective-repeat writer drops them all (its peer reports gaps with
// selective NAKs only), and a go-back-N writer rewinds at most once per
// half round trip (TestSequenceNAKFloodBounded in verbs/softroce bounds
// that; here the resends are only logged: how many depends on timing).
// The stream may fail, since a sequence NAK acknowledges what came before
// its PSN, but the reader never gets wrong bytes.
func TestForgedSequenceNAKFlood(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			a, b := newSides(t, quietConfig(m.goBackN), true)
			sa, sb := connect(t, a, b)
			defer sb.Close()
			defer sa.Close()
			sn := sniff(t, b, b.params.QPN)
			stop := make(chan struct{})
			f := startPaceFlow(sa, sb, 4, stop)
			time.Sleep(200 * time.Millisecond)
			c0 := a.dev.Counters()
			i := 0
			sent := flood(t, b.raw, b.link, a.link, 2*time.Second, func() []byte {
				newest, _ := sn.newest()
				i++
				return forgeAck(a.params.QPN, newest-uint32(4+60*(i%2)), wire.NAKSyndrome(wire.NAKPSNSeqErr))
			})
			c1 := a.dev.Counters()
			close(stop)
			<-f.done
			re, out := c1.Retransmits-c0.Retransmits, c1.SentPackets-c0.SentPackets
			t.Logf("%d forged sequence NAKs in 2 s; the writer sent %d packets, %d of them again; sequence NAKs taken %d", sent, out, re, c1.SeqNAKsRecv-c0.SeqNAKsRecv)
			if f.wrong != nil {
				t.Fatalf("the reader got wrong bytes: %v", f.wrong)
			}
			if f.err != nil {
				t.Logf("the stream failed: %v", f.err)
			}
			if !m.goBackN && c1.SeqNAKsRecv != c0.SeqNAKsRecv {
				t.Fatalf("a selective-repeat writer took %d plain sequence NAKs", c1.SeqNAKsRecv-c0.SeqNAKsRecv)
			}
		})
	}
}
