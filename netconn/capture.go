package netconn

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/rsock-go/rsock/verbs/softroce"
)

// Packet capture of the soft-RoCE devices, for Wireshark and tshark.
const (
	// EnvPcap names a file that every soft-RoCE device the process opens
	// from then on writes its packets to, as a pcap (see
	// softroce.Capture), with the process ID put in before the extension
	// (cap.pcap becomes cap.1234.pcap; see CapturePath): processes that
	// inherit the variable, such as a server and its children, each
	// write a valid file of their own, never one over another's. The
	// file is created, mode 0600, when the first device opens; a
	// symbolic link or another user's file in its place is refused
	// (softroce.CreateCapture).
	EnvPcap = "RSOCK_PCAP"
	// EnvPcapMax bounds the file, in bytes; default DefaultPcapMax. Once
	// it is reached, packets are counted and not written.
	EnvPcapMax = "RSOCK_PCAP_MAX"
	// DefaultPcapMax is the default bound of an RSOCK_PCAP file: 64 MiB.
	DefaultPcapMax = 64 << 20
)

// capture is the process's capture: one file, shared by the devices.
var capture struct {
	sync.Mutex
	path string
	c    *softroce.Capture
}

// deviceCapture returns the capture a device opening now writes to, or
// nil when $RSOCK_PCAP is empty. A new path starts a new file; a file that
// cannot be created is logged, and the device opens without a capture.
func deviceCapture() *softroce.Capture {
	path := os.Getenv(EnvPcap)
	capture.Lock()
	defer capture.Unlock()
	if path == "" || path == capture.path {
		if path == "" {
			return nil
		}
		return capture.c
	}
	limit := int64(DefaultPcapMax)
	if v := os.Getenv(EnvPcapMax); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			currentLogger().Warn("rsock: ignoring a bad "+EnvPcapMax, slog.String("value", v))
		} else {
			limit = n
		}
	}
	file := CapturePath(path, os.Getpid())
	c, err := softroce.CreateCapture(file, limit)
	if err != nil {
		currentLogger().Warn("rsock: no packet capture", slog.String("error", err.Error()))
		return nil
	}
	currentLogger().Info("rsock: packet capture", slog.String("file", file))
	capture.path, capture.c = path, c
	return c
}

// CapturePath returns the file that process pid writes its capture to when
// $RSOCK_PCAP is path: path with ".pid" put in before its extension, or
// at its end if it has none.
func CapturePath(path string, pid int) string {
	dir, base := filepath.Split(path)
	ext := filepath.Ext(base)
	if ext == base { // ".pcap" alone is a name, not an extension
		ext = ""
	}
	return dir + strings.TrimSuffix(base, ext) + "." + strconv.Itoa(pid) + ext
}

// closeCapture closes the process's capture file, if any; devices still
// open stop writing to it.
func closeCapture() error {
	capture.Lock()
	defer capture.Unlock()
	if capture.c == nil {
		return nil
	}
	err := capture.c.Close()
	capture.path, capture.c = "", nil
	return err
}

// captureStats are the counts of the process's capture.
func captureStats() softroce.CaptureStats {
	capture.Lock()
	defer capture.Unlock()
	if capture.c == nil {
		return softroce.CaptureStats{}
	}
	return capture.c.Stats()
}
