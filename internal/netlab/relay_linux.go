package netlab

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Relay copies every Ethernet frame that arrives on one interface out of
// the other, in both directions, applying an Impairment to each direction.
// It runs in the lab's middle namespace M, between A's and B's veths, and
// reads and writes with AF_PACKET sockets bound to the two interfaces; it
// ignores the frames it sends itself (PACKET_IGNORE_OUTGOING). Frames are
// forwarded as they are: the endpoints' veths must send finished frames of
// at most the MTU, which New sees to (segmentation and checksum offloads
// off).
type Relay struct {
	fds   [2]int // the sockets on interface a and b
	dirs  [2]*impairer
	drops [2]uint64 // kernel drops read so far, per socket
	stop  atomic.Bool

	runOnce sync.Once
}

// relayPoll bounds each wait for a frame, so that Stop takes effect.
const relayPoll = 50 * time.Millisecond

// OpenRelay opens the relay's sockets on interfaces a and b of the current
// network namespace; imp applies to both directions.
func OpenRelay(a, b string, imp Impairment) (*Relay, error) {
	if err := imp.Check(); err != nil {
		return nil, err
	}
	r := &Relay{fds: [2]int{-1, -1}}
	for i, name := range []string{a, b} {
		fd, err := openPacketSocket(name)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.fds[i] = fd
	}
	r.dirs[0] = newImpairer(imp, 0) // a to b
	r.dirs[1] = newImpairer(imp, 1) // b to a
	return r, nil
}

// openPacketSocket opens an AF_PACKET socket that receives every frame
// arriving on interface name and sends out of it.
func openPacketSocket(name string) (int, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return -1, fmt.Errorf("netlab relay: %w", err)
	}
	proto := int(htons(unix.ETH_P_ALL))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, fmt.Errorf("netlab relay: packet socket: %w", err)
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		return -1, fmt.Errorf("netlab relay: %s on %s: %w", what, name, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fail("PACKET_IGNORE_OUTGOING", err)
	}
	// Room for bursts: the endpoints' stacks can send faster than one
	// frame per system call for a while.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20); err != nil {
		return fail("SO_RCVBUFFORCE", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 16<<20); err != nil {
		return fail("SO_SNDBUFFORCE", err)
	}
	tv := unix.NsecToTimeval(relayPoll.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail("SO_RCVTIMEO", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	// Frames that arrived between socket and bind may be from any
	// interface: drop them.
	var buf [65536]byte
	for {
		if _, _, err := unix.Recvfrom(fd, buf[:], unix.MSG_DONTWAIT); err != nil {
			break
		}
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Run relays frames until Stop, then sends the frames still held, and
// returns. It may be called once.
func (r *Relay) Run() error {
	err := errors.New("netlab relay: Run called twice")
	r.runOnce.Do(func() {
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for d := range 2 {
			wg.Go(func() { errs[d] = r.relay(d) })
		}
		wg.Wait()
		err = errors.Join(errs...)
	})
	return err
}

// relay runs direction d: frames from socket d out of socket 1-d.
func (r *Relay) relay(d int) error {
	in, out, m := r.fds[d], r.fds[1-d], r.dirs[d]
	send := func(b []byte) error {
		_, err := unix.Write(out, b)
		return err
	}
	buf := make([]byte, 65536)
	pfd := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}}
	for !r.stop.Load() {
		if deadline, ok := m.nextDeadline(); ok {
			// A frame is held: wait no longer than its release time.
			wait := time.Until(deadline)
			if wait > 0 {
				ms := int((wait + time.Millisecond - 1) / time.Millisecond)
				if _, err := unix.Poll(pfd, ms); err != nil && err != unix.EINTR {
					return fmt.Errorf("netlab relay: poll: %w", err)
				}
			}
			m.expire(time.Now(), send)
			if pfd[0].Revents&unix.POLLIN == 0 {
				continue
			}
			pfd[0].Revents = 0
		}
		n, err := unix.Read(in, buf)
		if err != nil {
			if err == unix.EAGAIN || err == unix.EINTR {
				continue
			}
			return fmt.Errorf("netlab relay: read: %w", err)
		}
		m.frame(buf[:n], time.Now(), send)
	}
	m.flush(send)
	return nil
}

// Stop makes Run return within about 50 ms.
func (r *Relay) Stop() { r.stop.Store(true) }

// Report returns the counts of both directions. Call it after Run has
// returned.
func (r *Relay) Report() RelayReport {
	for i, fd := range r.fds {
		if fd < 0 {
			continue
		}
		if st, err := unix.GetsockoptTpacketStats(fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
			r.drops[i] += uint64(st.Drops) // the kernel resets them on each read
		}
	}
	rep := RelayReport{AToB: r.dirs[0].stats, BToA: r.dirs[1].stats}
	rep.AToB.KernelDrops, rep.BToA.KernelDrops = r.drops[0], r.drops[1]
	return rep
}

// Close closes the relay's sockets. Call it after Run has returned, or
// instead of Run.
func (r *Relay) Close() error {
	var first error
	for i, fd := range r.fds {
		if fd >= 0 {
			if err := unix.Close(fd); err != nil && first == nil {
				first = err
			}
			r.fds[i] = -1
		}
	}
	return first
}
