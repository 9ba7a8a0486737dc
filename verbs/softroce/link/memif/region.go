//go:build linux

package memif

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// maxRegionSize bounds a region: descriptor offsets are 32-bit.
const maxRegionSize = 1 << 32

// region is a shared memory region mapped into this process.
type region struct {
	mem []byte // the mapping; nil once unmapped
	fd  int    // the memfd, or -1
}

// createRegion makes a region of size bytes as memif clients do: a memfd
// sealed against shrinking (so that the peer, which maps it too, cannot
// make our accesses fault), sized and mapped.
func createRegion(name string, size int) (region, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return region{fd: -1}, fmt.Errorf("memif: memfd_create: %w", err)
	}
	r := region{fd: fd}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		r.close()
		return region{fd: -1}, fmt.Errorf("memif: sizing region to %d bytes: %w", size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		r.close()
		return region{fd: -1}, fmt.Errorf("memif: sealing region: %w", err)
	}
	r.mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		r.close()
		return region{fd: -1}, fmt.Errorf("memif: mapping region: %w", err)
	}
	return r, nil
}

// errRegion reports a region the peer offered that cannot be used safely.
var errRegion = errors.New("memif: unusable region")

// mapRegion maps a region received from a peer, after checking that the
// file really holds size bytes and cannot shrink below them: accessing a
// mapping beyond the end of its file faults (SIGBUS), which a hostile peer
// must not be able to cause. It takes ownership of fd.
func mapRegion(fd int, size uint64) (region, error) {
	r := region{fd: fd}
	if size == 0 || size > maxRegionSize {
		r.close()
		return region{fd: -1}, fmt.Errorf("%w: size %d not in (0, 4 GiB]", errRegion, size)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		r.close()
		return region{fd: -1}, fmt.Errorf("%w: fstat: %v", errRegion, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size < 0 || uint64(st.Size) < size {
		r.close()
		return region{fd: -1}, fmt.Errorf("%w: file of %d bytes for a %d-byte region (mode %#o)", errRegion, st.Size, size, st.Mode)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		r.close()
		return region{fd: -1}, fmt.Errorf("%w: file is not sealed against shrinking (F_SEAL_SHRINK)", errRegion)
	}
	r.mem, err = unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		r.close()
		return region{fd: -1}, fmt.Errorf("%w: mmap: %v", errRegion, err)
	}
	return r, nil
}

// close unmaps the region and closes its file. It is idempotent.
func (r *region) close() {
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem = nil
	}
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// errDesc reports a descriptor pointing outside the regions.
var errDesc = errors.New("memif: descriptor out of bounds")

// descBuffer returns the buffer a descriptor (copied out of the ring)
// names, with its length field as length: a slice of a region, with
// capacity capped. It fails for an unknown region or a buffer that does
// not lie wholly inside its region.
func descBuffer(regs []region, raw *[DescLen]byte) ([]byte, error) {
	d := Desc(raw[:])
	ri := int(d.Region())
	if ri >= len(regs) {
		return nil, fmt.Errorf("%w: region %d of %d", errDesc, ri, len(regs))
	}
	mem := regs[ri].mem
	off, n := uint64(d.Offset()), uint64(d.Length())
	if off+n > uint64(len(mem)) {
		return nil, fmt.Errorf("%w: bytes [%d, %d) of a %d-byte region", errDesc, off, off+n, len(mem))
	}
	return mem[off : off+n : off+n], nil
}
