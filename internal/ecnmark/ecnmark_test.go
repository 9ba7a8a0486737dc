//go:build linux

package ecnmark

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// newMarker loads a marker or skips t where BPF programs cannot be
// loaded (not root, no BPF).
func newMarker(t *testing.T, cfg Config) *Marker {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot load BPF programs")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Skipf("cannot lift the memlock limit for BPF: %v", err)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// monotonic is CLOCK_MONOTONIC in ns, the clock bpf_ktime_get_ns reads.
func monotonic(t *testing.T) int64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano()
}

// frame4 is an Ethernet frame with an IPv4/UDP packet of 100 bytes whose
// TOS byte is tos, its header checksum correct.
func frame4(tos byte) []byte {
	b := make([]byte, 14+100)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0], ip[1] = 0x45, tos
	binary.BigEndian.PutUint16(ip[2:], 100)
	ip[6], ip[8], ip[9] = 0x40, 64, 17
	copy(ip[12:], []byte{10, 77, 0, 1, 10, 77, 1, 2})
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip[:20]))
	return b
}

// frame6 is an Ethernet frame with an IPv6/UDP packet whose traffic class
// is tc.
func frame6(tc byte) []byte {
	b := make([]byte, 14+40+60)
	binary.BigEndian.PutUint16(b[12:], 0x86dd)
	ip := b[14:]
	ip[0], ip[1] = 0x60|tc>>4, tc<<4
	binary.BigEndian.PutUint16(ip[4:], 60)
	ip[6], ip[7] = 17, 64
	ip[8], ip[23], ip[24], ip[39] = 0xfd, 1, 0xfd, 2
	return b
}

func ipChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		if i == 10 {
			continue
		}
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// ecn4 and ecn6 read the ECN codepoint of a frame.
func ecn4(b []byte) byte { return b[15] & 3 }
func ecn6(b []byte) byte { return b[15] >> 4 & 3 }

// TestMarksOverThreshold runs the program on crafted frames: at 8 kbit/s
// a 114-byte frame waits 114 ms, over the 1 ms threshold, so ECT(0) and
// ECT(1) frames leave CE (IPv4 with a correct checksum), and Not-ECT and
// CE frames leave as they came; at 10 Gbit/s, or behind a bucket with
// credit, nothing is marked.
func TestMarksOverThreshold(t *testing.T) {
	slow := Config{Rate: 8000, Threshold: time.Millisecond, Limit: time.Hour}
	for _, c := range []struct {
		name string
		cfg  Config
		in   []byte
		ecn  func([]byte) byte
		want byte
		mark uint64
	}{
		{"ipv4-ect0", slow, frame4(0x02), ecn4, 3, 1},
		{"ipv4-ect1", slow, frame4(0xb9), ecn4, 3, 1},
		{"ipv4-not-ect", slow, frame4(0xb8), ecn4, 0, 0},
		{"ipv4-ce", slow, frame4(0x03), ecn4, 3, 0},
		{"ipv6-ect0", slow, frame6(0x02), ecn6, 3, 1},
		{"ipv6-ect1", slow, frame6(0x01), ecn6, 3, 1},
		{"ipv6-not-ect", slow, frame6(0x00), ecn6, 0, 0},
		{"ipv4-ect0-fast", Config{Rate: 10e9}, frame4(0x02), ecn4, 2, 0},
		// A bucket of 10 kB at 1 kB/s: 10 s of credit before a queue.
		{"ipv4-ect0-bucket", Config{Rate: 8000, Threshold: time.Millisecond, Limit: time.Hour, Burst: 10000}, frame4(0x02), ecn4, 2, 0},
		{"ipv6-ect1-fast", Config{Rate: 10e9}, frame6(0x01), ecn6, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newMarker(t, c.cfg)
			out, err := m.Test(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.ecn(out); got != c.want {
				t.Errorf("ECN codepoint %d after the program, want %d", got, c.want)
			}
			for i := range out {
				if i != 15 && (i < 24 || i > 25) && out[i] != c.in[i] {
					t.Errorf("byte %d changed from %#x to %#x", i, c.in[i], out[i])
				}
			}
			if binary.BigEndian.Uint16(out[12:]) == 0x0800 {
				if got := binary.BigEndian.Uint16(out[24:]); got != ipChecksum(out[14:34]) {
					t.Errorf("IPv4 header checksum %#x, want %#x", got, ipChecksum(out[14:34]))
				}
			}
			n, err := m.Counts()
			if err != nil {
				t.Fatal(err)
			}
			wantECT := uint64(0)
			if c.ecn(c.in) != 0 {
				wantECT = 1
			}
			if n != (Counts{Packets: 1, ECT: wantECT, Marked: c.mark}) {
				t.Errorf("counts %+v, want packets 1, ECT %d, marked %d", n, wantECT, c.mark)
			}
		})
	}
}

// TestVirtualQueue checks the queue's arithmetic with 1000 back-to-back
// runs of the program in the kernel (BPF_PROG_TEST_RUN's repeat, far
// faster than the 11.4 µs a 114-byte frame takes at 80 Mbit/s): the queue
// passes the 100 µs threshold and the frame (the same skb each run) is
// marked once; it grows no further than the limit; once it drained, a
// frame passes unmarked.
func TestVirtualQueue(t *testing.T) {
	limit := 2 * time.Millisecond
	m := newMarker(t, Config{Rate: 80e6, Threshold: 100 * time.Microsecond, Limit: limit})
	in := frame4(0x02)
	out := make([]byte, len(in))
	if _, err := m.prog.Run(&ebpf.RunOptions{Data: in, DataOut: out, Repeat: 1000}); err != nil {
		t.Fatal(err)
	}
	if ecn4(out) != 3 {
		t.Errorf("ECN codepoint %d after 1000 runs, want CE", ecn4(out))
	}
	var s state
	if err := m.m.Lookup(uint32(0), &s); err != nil {
		t.Fatal(err)
	}
	if q := time.Duration(int64(s.DrainAt) - monotonic(t)); q > limit || q < limit/2 {
		t.Errorf("virtual queue %v after 1000 frames at once, want about the limit %v", q, limit)
	}
	if s.Packets != 1000 || s.ECT != 1000 || s.Marked != 1 {
		t.Errorf("counts %+v, want 1000 packets, 1000 ECT, 1 marked (the skb stays CE once marked)", s)
	}
	time.Sleep(2 * limit)
	got, err := m.Test(frame4(0x02))
	if err != nil {
		t.Fatal(err)
	}
	if ecn4(got) != 2 {
		t.Errorf("ECN codepoint %d after the queue drained, want ECT(0) untouched", ecn4(got))
	}
}

// TestVirtualQueueConcurrent runs the program on two CPUs at once, as a
// device whose packets two CPUs transmit does: every frame must advance
// the virtual queue by its time at the rate, none lost to the other
// CPU's update of the same state. At 100 kbit/s a 114-byte frame takes
// 9.12 ms and the queue never drains during the runs, so the queue ends
// where the first frame began it plus every frame's time.
func TestVirtualQueueConcurrent(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: the program's runs cannot overlap")
	}
	m := newMarker(t, Config{Rate: 100e3, Threshold: time.Millisecond, Limit: time.Hour})
	const runs, repeat = 2, 20000
	start := monotonic(t)
	errs := make(chan error, runs)
	for range runs {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			in := frame4(0x02)
			_, err := m.prog.Run(&ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)), Repeat: repeat})
			errs <- err
		}()
	}
	for range runs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	end := monotonic(t)
	var s state
	if err := m.m.Lookup(uint32(0), &s); err != nil {
		t.Fatal(err)
	}
	if s.Packets != runs*repeat {
		t.Fatalf("%d packets counted, want %d", s.Packets, runs*repeat)
	}
	frame := int64(len(frame4(0))) * psPerByte(100e3) / 1000
	began := int64(s.DrainAt) - runs*repeat*frame
	if began < start || began > end {
		t.Errorf("the queue drains at %d ns: %d frames of %v each after %d, outside the runs (%d to %d): %.1f frames' updates lost",
			s.DrainAt, runs*repeat, time.Duration(frame), began, start, end, float64(start-began)/float64(frame))
	}
}

// TestCmpXchgEncoding: the compare-and-exchange the queue advances by
// reaches the kernel as one (BPF_CMPXCHG in the immediate), not as the
// atomic add cilium/ebpf v0.22.0's Mem alone encodes.
func TestCmpXchgEncoding(t *testing.T) {
	var b bytes.Buffer
	if _, err := cmpXchg(asm.R7, asm.R3, asm.DWord, 0).Marshal(&b, binary.LittleEndian); err != nil {
		t.Fatal(err)
	}
	const bpfCmpXchg = 0xf0 | 0x01 // BPF_CMPXCHG | BPF_FETCH
	if imm := binary.LittleEndian.Uint32(b.Bytes()[4:8]); imm != bpfCmpXchg {
		t.Errorf("immediate %#x, want %#x", imm, bpfCmpXchg)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]uint64{"100mbit": 100e6, "1gbit": 1e9, "400Mbit": 400e6, "2.5gbit": 2.5e9, "9600": 9600, "64kbit": 64e3} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fast", "-1mbit", "0", "1e20gbit"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) succeeded", in)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{}, {Rate: 1e6, Threshold: time.Second, Limit: time.Millisecond}} {
		if _, err := New(c); err == nil || errors.Is(err, os.ErrPermission) {
			t.Errorf("New(%+v) = %v, want a config error", c, err)
		}
	}
}
