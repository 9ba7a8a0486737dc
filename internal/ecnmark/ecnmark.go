//go:build linux

// Package ecnmark is a CE-marking bottleneck for tests and benchmarks: a
// tc BPF program, attached with tcx at a device's egress, that runs a
// virtual queue in front of the device's real queue (a tbf, say) and sets
// CE on ECN-capable packets while that virtual queue is longer than a
// threshold. The kernel this project runs on has no marking qdisc (RED,
// fq_codel, PIE are not built), but it runs tc BPF programs, and those may
// call bpf_skb_ecn_set_ce.
//
// The virtual queue is a phantom queue (as in HULL, NSDI'12): the program
// keeps the time at which a queue served at Rate would drain, advances it
// by len/Rate for each packet, and, when the packet would wait longer
// than Threshold in it, marks it CE if it is ECT(0) or ECT(1) (the helper
// leaves Not-ECT packets alone). A packet that would wait longer than
// Limit is taken for dropped by the real queue and does not advance the
// virtual one. At the real queue's rate (or a little below), the marks
// start as soon as the real queue holds Threshold, so that a flow that
// reacts to them keeps the real queue short and loses nothing.
//
// A token bucket (tbf) in front of the real queue lets a burst of up to
// its bucket pass at once after a pause; Burst gives the virtual queue
// the same credit (it may lag behind the present by up to Burst's time at
// Rate), so that it stands where the real queue stands. Without it, the
// GSO bursts of a sender on a fast path filled the virtual queue past a
// 1 ms threshold while the real one behind a 64 KiB bucket stayed empty,
// and nearly every packet was marked.
//
// Every CPU that transmits on the device runs the program on the same
// state: the virtual queue advances by compare-and-exchange, so that no
// packet's time is lost to another CPU's update (with a plain load and
// store, two CPUs running it at once lost 7 and 17 of 40,000 advances).
//
// The program is assembled here with cilium/ebpf's asm package; no C
// compiler is involved. It needs root (CAP_BPF and CAP_NET_ADMIN) and a
// kernel with tcx (6.6 or later).
package ecnmark

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/rsock-go/rsock/internal/netns"
)

// Config describes a marker.
type Config struct {
	// Rate is the virtual queue's service rate in bits per second: the
	// rate of the real bottleneck behind it, or a little less.
	Rate uint64
	// Threshold is the queueing delay above which ECT packets are marked
	// CE (DCTCP's K); default 1 ms.
	Threshold time.Duration
	// Limit is the longest the virtual queue grows (the real queue's
	// depth); default 20 ms.
	Limit time.Duration
	// Burst is the bucket of the token bucket behind the marker, in
	// bytes (tbf's burst); 0 for none.
	Burst uint64
}

// Counts are the marker's counters since it was made.
type Counts struct {
	// Packets is every packet the program saw.
	Packets uint64 `json:"packets"`
	// ECT is the packets that arrived with an ECN codepoint other than
	// Not-ECT (ECT(0), ECT(1) or CE).
	ECT uint64 `json:"ect"`
	// Marked is the packets the program set CE on.
	Marked uint64 `json:"marked"`
}

// state is the map value: the time the virtual queue drains (monotonic
// ns, as bpf_ktime_get_ns) and the counters.
type state struct {
	DrainAt uint64
	Packets uint64
	ECT     uint64
	Marked  uint64
}

// Offsets of state's fields in the map value.
const (
	offDrainAt = 0
	offPackets = 8
	offECT     = 16
	offMarked  = 24
)

// Marker is a loaded marking program and its state map; Attach puts it on
// a device.
type Marker struct {
	prog *ebpf.Program
	m    *ebpf.Map
}

// New loads the marking program for cfg.
func New(cfg Config) (*Marker, error) {
	if cfg.Rate == 0 {
		return nil, errors.New("ecnmark: Config.Rate is 0")
	}
	if cfg.Threshold == 0 {
		cfg.Threshold = time.Millisecond
	}
	if cfg.Limit == 0 {
		cfg.Limit = 20 * time.Millisecond
	}
	if cfg.Threshold < 0 || cfg.Limit < cfg.Threshold {
		return nil, fmt.Errorf("ecnmark: threshold %v and limit %v: want 0 < threshold <= limit", cfg.Threshold, cfg.Limit)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "ecnmark_state", Type: ebpf.Array, KeySize: 4, ValueSize: 32, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("ecnmark: map: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "ecnmark",
		Type:         ebpf.SchedCLS,
		Instructions: program(m.FD(), cfg),
		License:      "Dual MIT/GPL",
	})
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("ecnmark: program: %w", err)
	}
	return &Marker{prog: prog, m: m}, nil
}

// psPerByte is how many picoseconds a byte takes at rate bits per second.
func psPerByte(rate uint64) int64 { return int64(8e12 / float64(rate)) }

// burstNs is how long the bucket's credit lasts at the rate.
func burstNs(cfg Config) int64 { return int64(cfg.Burst) * psPerByte(cfg.Rate) / 1000 }

// casTries is how many times a packet tries to advance the virtual queue
// against the updates of other CPUs before it gives up (and is not
// counted in it).
const casTries = 8

// cmpXchg is asm.CmpXchg.Mem with the operation in the instruction's
// immediate, where the kernel reads it: cilium/ebpf v0.22.0 marshals an
// atomic instruction's immediate from its Constant, which Mem leaves at 0
// (BPF_ADD), so that CmpXchg.Mem and Xchg.Mem load as an atomic add.
func cmpXchg(dst, src asm.Register, size asm.Size, off int16) asm.Instruction {
	ins := asm.CmpXchg.Mem(dst, src, size, off)
	ins.Constant = int64(asm.CmpXchg >> 8)
	return ins
}

// tcxNext is the tcx verdict that passes the packet on (to the next
// program, then the qdisc).
const tcxNext = -1

// program assembles the marker for the state map mapFD.
func program(mapFD int, cfg Config) asm.Instructions {
	const (
		ctx   = asm.R6 // the __sk_buff
		st    = asm.R7 // the map value
		now   = asm.R8 // bpf_ktime_get_ns
		ecn   = asm.R9 // the packet's ECN codepoint
		skLen = 0      // offsetof(struct __sk_buff, len)
		l3    = 14     // the IP header, after the Ethernet header
	)
	return asm.Instructions{
		asm.Mov.Reg(ctx, asm.R1),
		asm.Mov.Imm(ecn, 0),
		asm.FnKtimeGetNs.Call(),
		asm.Mov.Reg(now, asm.R0),
		// st = lookup(map, 0)
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, mapFD),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Reg(st, asm.R0),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(st, asm.R1, asm.DWord, offPackets),
		// The first two bytes of the IP header: the version, and the
		// ECN bits (IPv4: the TOS byte; IPv6: the traffic class, split
		// across both bytes).
		asm.Mov.Reg(asm.R1, ctx),
		asm.Mov.Imm(asm.R2, l3),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -8),
		asm.Mov.Imm(asm.R4, 2),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "queue"),
		asm.LoadMem(asm.R1, asm.RFP, -8, asm.Byte),
		asm.RSh.Imm(asm.R1, 4),
		asm.LoadMem(asm.R2, asm.RFP, -7, asm.Byte),
		asm.JEq.Imm(asm.R1, 4, "v4"),
		asm.JNE.Imm(asm.R1, 6, "queue"),
		asm.RSh.Imm(asm.R2, 4),
		asm.And.Imm(asm.R2, 3).WithSymbol("v4"),
		asm.Mov.Reg(ecn, asm.R2),
		asm.JEq.Imm(ecn, 0, "queue"),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(st, asm.R1, asm.DWord, offECT),
		// The virtual queue: it drains at drainAt, which lags behind
		// now by at most the bucket's credit (an empty queue with its
		// bucket full); this packet adds len × psPerByte / 1000 ns.
		asm.LoadMem(asm.R2, ctx, skLen, asm.Word).WithSymbol("queue"),
		asm.LoadImm(asm.R3, psPerByte(cfg.Rate), asm.DWord),
		asm.Mul.Reg(asm.R2, asm.R3),
		asm.Div.Imm(asm.R2, 1000),
		asm.Mov.Imm(asm.R5, casTries),
		// R1 = drainAt as read; R3 = drainAt with this packet.
		asm.LoadMem(asm.R1, st, offDrainAt, asm.DWord).WithSymbol("read"),
		asm.Mov.Reg(asm.R3, now),
		asm.LoadImm(asm.R4, burstNs(cfg), asm.DWord),
		asm.Sub.Reg(asm.R3, asm.R4),
		asm.JGE.Reg(asm.R3, asm.R1, "add"),
		asm.Mov.Reg(asm.R3, asm.R1),
		asm.Add.Reg(asm.R3, asm.R2).WithSymbol("add"),
		// R4 = the wait of this packet's last byte (negative: the
		// bucket still has credit).
		asm.Mov.Reg(asm.R4, asm.R3),
		asm.Sub.Reg(asm.R4, now),
		asm.LoadImm(asm.R0, int64(cfg.Limit), asm.DWord),
		asm.JSGT.Reg(asm.R4, asm.R0, "out"),
		// drainAt = R3 if it still holds R1 (compare and exchange: the
		// other CPUs run this program on the same state); else read it
		// again, up to casTries times.
		asm.Mov.Reg(asm.R0, asm.R1),
		cmpXchg(st, asm.R3, asm.DWord, offDrainAt),
		asm.JEq.Reg(asm.R0, asm.R1, "judge"),
		asm.Sub.Imm(asm.R5, 1),
		asm.JNE.Imm(asm.R5, 0, "read"),
		// Stored, or given up: is the wait over the threshold?
		asm.LoadImm(asm.R3, int64(cfg.Threshold), asm.DWord).WithSymbol("judge"),
		asm.JSLE.Reg(asm.R4, asm.R3, "out"),
		// Over the threshold: mark ECT(0) and ECT(1); Not-ECT and CE
		// pass as they are.
		asm.JEq.Imm(ecn, 0, "out"),
		asm.JEq.Imm(ecn, 3, "out"),
		asm.Mov.Reg(asm.R1, ctx),
		asm.FnSkbEcnSetCe.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(st, asm.R1, asm.DWord, offMarked),
		asm.Mov.Imm(asm.R0, tcxNext).WithSymbol("out"),
		asm.Return(),
	}
}

// Counts reads the marker's counters.
func (m *Marker) Counts() (Counts, error) {
	var s state
	if err := m.m.Lookup(uint32(0), &s); err != nil {
		return Counts{}, fmt.Errorf("ecnmark: reading the counters: %w", err)
	}
	return Counts{Packets: s.Packets, ECT: s.ECT, Marked: s.Marked}, nil
}

// Test runs the program once on the frame pkt (Ethernet header first), as
// BPF_PROG_TEST_RUN does, and returns the frame as the program left it.
func (m *Marker) Test(pkt []byte) ([]byte, error) {
	_, out, err := m.prog.Test(pkt)
	if err != nil {
		return nil, fmt.Errorf("ecnmark: test run: %w", err)
	}
	return out, nil
}

// Close unloads the program and its map. A device it is attached to keeps
// it until its Attachment is closed.
func (m *Marker) Close() error {
	return errors.Join(m.prog.Close(), m.m.Close())
}

// Attachment is the marker on a device's egress; Close takes it off.
type Attachment struct{ l link.Link }

// Close detaches the program.
func (a *Attachment) Close() error { return a.l.Close() }

// Attach puts the marker at the egress of device dev, in network
// namespace netns (a name under /var/run/netns, as ip netns knows it), or
// in the calling process's namespace when netns is "". The program stays
// attached while the Attachment is open (and the process lives).
func (m *Marker) Attach(netns, dev string) (*Attachment, error) {
	var l link.Link
	err := inNetns(netns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		l, err = link.AttachTCX(link.TCXOptions{Interface: ifi.Index, Program: m.prog, Attach: ebpf.AttachTCXEgress})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ecnmark: attach to %s in netns %q: %w", dev, netns, err)
	}
	return &Attachment{l: l}, nil
}

// inNetns runs f on an OS thread moved into network namespace name (the
// current one when name is ""), and moves the thread back afterwards
// (internal/netns).
func inNetns(name string, f func() error) error {
	if name == "" {
		return f()
	}
	if strings.ContainsRune(name, '/') {
		return fmt.Errorf("netns name %q has a slash", name)
	}
	var ferr error
	if err := netns.Do(name, func() { ferr = f() }); err != nil {
		return errors.Join(ferr, err)
	}
	return ferr
}

// ParseRate reads a rate as tc writes it: a number of bits per second
// with an optional unit kbit, mbit or gbit (powers of 1000), e.g.
// "100mbit".
func ParseRate(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 || v*float64(mult) < 1 || v*float64(mult) > 1e13 {
		return 0, fmt.Errorf("ecnmark: rate %q: want e.g. 100mbit", s)
	}
	return uint64(v * float64(mult)), nil
}
