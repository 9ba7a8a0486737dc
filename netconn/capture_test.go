package netconn

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rsock-go/rsock/verbs/softroce/pcap"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// TestCapture runs a netconn stream over the udp link with RSOCK_PCAP set
// and checks the file: every frame is Ethernet/IPv4/UDP with a RoCEv2
// packet whose ICRC verifies; tshark decodes every frame as InfiniBand with
// nothing malformed; and scripts/icrc_check.py, an independent ICRC
// implementation, verifies every ICRC. The last two are subtests that skip,
// saying so, where tshark or python3 is not installed.
func TestCapture(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rsock.pcap")
	t.Setenv(EnvPcap, file)
	t.Setenv(EnvPcapMax, "")
	defer closeCapture()
	defer func(f func() int) { maxDevices = f }(maxDevices)
	maxDevices = func() int { return 1 } // one device: the packets go between its QPs
	ln := listenOn(t, ListenConfig{Provider: ProviderSoftRoCE, Link: LinkUDP}, "127.0.0.5:0")
	d := &Dialer{Provider: ProviderSoftRoCE, Link: LinkUDP}
	d.LocalAddr = &net.TCPAddr{IP: net.ParseIP("127.0.0.5")}
	c, s := connPair(t, ln, d)
	if transport(c) != "rdma/softroce/udp" {
		t.Fatalf("transport %q", transport(c))
	}
	echoCheck(t, c, s, 1<<20)
	c.Close()
	s.Close()
	st := Snapshot().Capture
	if err := closeCapture(); err != nil {
		t.Fatal(err)
	}
	file = CapturePath(file, os.Getpid())
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	frames, port := checkFrames(t, b)
	t.Logf("%d frames, %d bytes; capture %+v", frames, len(b), st)
	if uint64(frames) != st.Written || st.Skipped != 0 || st.NoID != 0 || frames < 2*(1<<20)/4096 {
		t.Errorf("%d frames in the file, capture %+v", frames, st)
	}

	t.Run("tshark", func(t *testing.T) {
		tshark, err := exec.LookPath("tshark")
		if err != nil {
			t.Skip("tshark is not installed (.ci/run installs it): the tshark decode is not checked")
		}
		args := []string{"-r", file}
		if port != 4791 {
			args = append(args, "-d", fmt.Sprintf("udp.port==%d,infiniband", port))
		}
		out, err := exec.Command(tshark, append(args, "-T", "fields", "-e", "frame.protocols")...).Output()
		if err != nil {
			t.Fatalf("tshark: %v", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		for i, l := range lines {
			if !strings.Contains(l, ":udp:infiniband") || strings.Contains(l, "malformed") {
				t.Fatalf("tshark: frame %d decodes as %q", i+1, l)
			}
		}
		if len(lines) != frames {
			t.Errorf("tshark read %d frames, want %d", len(lines), frames)
		}
		out, err = exec.Command(tshark, append(args, "-V", "-c", "2")...).Output()
		if err != nil {
			t.Fatalf("tshark -V: %v", err)
		}
		for _, want := range []string{"InfiniBand", "Base Transport Header", "Invariant CRC"} {
			if !bytes.Contains(out, []byte(want)) {
				t.Errorf("tshark -V lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("icrc_check.py", func(t *testing.T) {
		py, err := exec.LookPath("python3")
		if err != nil {
			t.Skip("python3 is not installed (.ci/run installs it): scripts/icrc_check.py is not run")
		}
		out, err := exec.Command(py, "../scripts/icrc_check.py", file).CombinedOutput()
		if want := fmt.Sprintf("icrc ok=%d bad=0 skipped=0", frames); err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("icrc_check.py: %v: %s, want %s", err, out, want)
		}
	})
}

// checkFrames parses a capture and checks every frame's headers and ICRC;
// it returns the number of frames and the first frame's UDP port.
func checkFrames(t *testing.T, b []byte) (int, uint16) {
	t.Helper()
	r, err := pcap.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	n, port := 0, uint16(0)
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return n, port
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		f := p.Data
		hl := wire.EthernetLen + wire.IPv4MinLen + wire.UDPLen
		if len(f) < hl+wire.BTHLen+wire.ICRCLen || wire.Ethernet(f).EtherType() != wire.EtherTypeIPv4 {
			t.Fatalf("frame %d: % x", n, f)
		}
		ip := wire.IPv4(f[wire.EthernetLen:])
		if ip.Src() != netip.MustParseAddr("127.0.0.5") || !ip.ChecksumValid() {
			t.Fatalf("frame %d: IPv4 header % x", n, f[wire.EthernetLen:hl])
		}
		u := wire.UDP(ip.Payload())
		if port == 0 {
			port = u.DstPort()
		}
		body := f[hl : len(f)-wire.ICRCLen]
		if _, err := wire.Parse(body); err != nil {
			t.Fatalf("frame %d: %v", n, err)
		}
		if wire.ICRCOf(f[len(f)-wire.ICRCLen:]) != wire.ComputeICRCFromHeaders(f[wire.EthernetLen:hl], body) {
			t.Fatalf("frame %d: the ICRC does not verify", n)
		}
	}
}

func TestCapturePath(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"cap.pcap", "cap.42.pcap"},
		{"/tmp/x/cap.pcap", "/tmp/x/cap.42.pcap"},
		{"cap", "cap.42"},
		{"dir.d/cap", "dir.d/cap.42"},
		{".pcap", ".pcap.42"},
		{"a.b.pcap", "a.b.42.pcap"},
	} {
		if got := CapturePath(c.in, 42); got != c.want {
			t.Errorf("CapturePath(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
