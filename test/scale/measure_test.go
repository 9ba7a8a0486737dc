package scale

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/netconn"
)

// usage is what a process holds at one moment.
type usage struct {
	RSSKiB     int64  `json:"rss_kib"` // VmRSS
	HWMKiB     int64  `json:"hwm_kib"` // VmHWM, the peak RSS
	HeapAlloc  uint64 `json:"heap_alloc"`
	Sys        uint64 `json:"sys"` // everything the Go runtime took from the OS
	FDs        int    `json:"fds"`
	Goroutines int    `json:"goroutines"`
	Maps       int    `json:"maps"` // lines of /proc/self/maps (vm.max_map_count bounds them)
	Devices    int    `json:"devices"`
	Registered uint64 `json:"registered"` // bytes registered on all devices
	RDMAConns  int    `json:"rdma_conns"`
	TCPConns   int    `json:"tcp_conns"`
}

// measure returns the process's usage now, after a garbage collection.
func measure() (usage, error) {
	var u usage
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	u.HeapAlloc, u.Sys = ms.HeapAlloc, ms.Sys
	u.Goroutines = runtime.NumGoroutine()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return u, err
	}
	u.FDs = len(fds) - 1 // the directory ReadDir opened
	if u.RSSKiB, u.HWMKiB, err = rss(); err != nil {
		return u, err
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return u, err
	}
	u.Maps = bytes.Count(maps, []byte("\n"))
	st := netconn.Snapshot()
	u.Devices, u.Registered, u.TCPConns = len(st.Devices), st.RegisteredBytes, len(st.TCPConns)
	for _, d := range st.Devices {
		u.RDMAConns += len(d.Conns)
	}
	return u, nil
}

// rss reads VmRSS and VmHWM from /proc/self/status, in KiB.
func rss() (rss, hwm int64, err error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/self/status %s: %v", k, err)
		}
		if k == "VmRSS" {
			rss = n
		} else {
			hwm = n
		}
	}
	return rss, hwm, sc.Err()
}

// raiseNoFile raises the soft limit on file descriptors to the hard limit
// and returns it. A process that may (root) raises the hard limit to
// want first when it is lower: an shm connection holds one descriptor on
// each side (its TCP socket; the channel's doorbells are per channel).
func raiseNoFile(want uint64) (uint64, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Max < want && unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: want, Max: want}) == nil {
		return want, nil
	}
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return lim.Cur, nil
}

// perConn is the growth from base to u per connection, for the log.
func perConn(base, u usage, n int) string {
	if n == 0 {
		return "no connections"
	}
	return fmt.Sprintf("RSS %.1f KiB, Go heap %.1f KiB, Go sys %.1f KiB, registered %.1f KiB, fds %.2f, goroutines %.2f",
		float64(u.RSSKiB-base.RSSKiB)/float64(n),
		float64(int64(u.HeapAlloc)-int64(base.HeapAlloc))/1024/float64(n),
		float64(int64(u.Sys)-int64(base.Sys))/1024/float64(n),
		float64(int64(u.Registered)-int64(base.Registered))/1024/float64(n),
		float64(u.FDs-base.FDs)/float64(n), float64(u.Goroutines-base.Goroutines)/float64(n))
}

func (u usage) String() string {
	return fmt.Sprintf("RSS %d MiB (peak %d MiB), Go heap %d MiB, Go sys %d MiB, fds %d, maps %d, goroutines %d, devices %d, registered %d MiB, conns %d RDMA + %d TCP",
		u.RSSKiB>>10, u.HWMKiB>>10, u.HeapAlloc>>20, u.Sys>>20, u.FDs, u.Maps, u.Goroutines, u.Devices, u.Registered>>20, u.RDMAConns, u.TCPConns)
}
