//go:build linux

package shm

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// seals are what every memfd a peer maps must carry: its size can never
// change, so the peer's mapping can never fault (SIGBUS) beyond the end.
const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// newMemfd creates a sealed memfd of size bytes holding data (zeros
// beyond it). Pages of data that are all zeros are not written, so they
// take no memory until used (a fresh ring registered for a connection).
func newMemfd(name string, size int, data []byte) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("shm: memfd_create: %w", err)
	}
	if err = unix.Ftruncate(fd, int64(size)); err == nil {
		for off := 0; off < len(data) && err == nil; off += pageSize {
			page := data[off:min(off+pageSize, len(data))]
			if allZero(page) {
				continue
			}
			for k := 0; k < len(page) && err == nil; {
				var n int
				n, err = unix.Pwrite(fd, page[k:], int64(off+k))
				k += n
			}
		}
	}
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals)
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("shm: memfd of %d bytes: %w", size, err)
	}
	return fd, nil
}

// checkMemfd verifies that a descriptor from the peer is a memfd whose
// size is sealed and at least size bytes.
func checkMemfd(fd int, size uint64) error {
	s, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("shm: peer's descriptor is not a memfd: %w", err)
	}
	if s&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW {
		return fmt.Errorf("shm: peer's memfd is not sealed against resizing (seals %#x)", s)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("shm: fstat of peer's memfd: %w", err)
	}
	if st.Size < 0 || uint64(st.Size) < size {
		return fmt.Errorf("shm: peer's memfd holds %d bytes, %d needed", st.Size, size)
	}
	return nil
}

// checkEventfd verifies that a descriptor from the peer is an eventfd and
// makes it non-blocking, so ringing it can never block.
func checkEventfd(fd int) error {
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return fmt.Errorf("shm: peer's doorbell: %w", err)
	}
	if link != "anon_inode:[eventfd]" {
		return fmt.Errorf("shm: peer's doorbell is %q, not an eventfd", link)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil && fl&unix.O_NONBLOCK == 0 {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NONBLOCK)
	}
	if err != nil {
		return fmt.Errorf("shm: peer's doorbell: %w", err)
	}
	return nil
}

// ring adds one to an eventfd. A full counter (EAGAIN) already wakes.
func ring(fd int) {
	var one = [8]byte{1}
	unix.Write(fd, one[:])
}

// allZero reports whether b holds only zeros (reading untouched anonymous
// pages maps the kernel's zero page: no memory is used).
func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.NativeEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
