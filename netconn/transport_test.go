package netconn

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	trMemif = "rdma/softroce/memif"
	trShm   = "rdma/shm"
	trUDP   = "rdma/softroce/udp"
)

func checkReason(t *testing.T, side string, c net.Conn, want string) {
	t.Helper()
	got := c.(*Conn).FallbackReason()
	if want == "" && got != "" || !strings.Contains(got, want) {
		t.Errorf("%s's FallbackReason %q, want %q", side, got, want)
	}
}

func TestSameHost(t *testing.T) {
	for _, tc := range []struct {
		local, remote string
		want          bool
	}{
		{"127.0.0.1", "127.0.0.1", true},
		{"127.0.0.1", "127.0.0.2", true},
		{"::1", "::1", true},
		{"10.0.0.1", "10.0.0.1", true},
		{"10.0.0.1", "::ffff:10.0.0.1", true},
		{"10.0.0.1", "10.0.0.2", false},
		{"fd00::1", "fd00::2", false},
	} {
		if got := sameHost(netip.MustParseAddr(tc.local), netip.MustParseAddr(tc.remote)); got != tc.want {
			t.Errorf("sameHost(%s, %s) = %v", tc.local, tc.remote, got)
		}
	}
}

// linkResidue lists what the same-host links left in this process:
// mappings and file descriptors of memif regions and shm arenas, bound
// abstract memif and shm sockets, shm channels and their goroutines.
func linkResidue(t *testing.T) []string {
	t.Helper()
	var left []string
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.Contains(line, "memif_region") || strings.Contains(line, "rsock-shm") {
			left = append(left, "mapping "+line)
		}
	}
	fds, _ := filepath.Glob("/proc/self/fd/*")
	sockets := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(fd)
		if err != nil {
			continue
		}
		if strings.Contains(target, "memif_region") || strings.Contains(target, "rsock-shm") {
			left = append(left, "fd "+target)
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			sockets[strings.TrimSuffix(inode, "]")] = true
		}
	}
	unix, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(unix), "\n") {
		f := strings.Fields(line)
		if len(f) >= 8 && sockets[f[6]] && (strings.HasPrefix(f[7], "@rsock-memif-") || strings.HasPrefix(f[7], "@rsock-shm-")) {
			left = append(left, "socket "+f[7])
		}
	}
	shmChannelsLeft(&left)
	return left
}
