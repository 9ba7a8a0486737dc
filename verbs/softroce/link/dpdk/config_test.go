package dpdk

import (
	"net/netip"
	"slices"
	"testing"
)

func TestEALArgs(t *testing.T) {
	got := EALArgs("", 42)
	want := append(slices.Clone(DefaultEALArgs), "--file-prefix", "rsock-42")
	if !slices.Equal(got, want) {
		t.Fatalf("defaults: %q, want %q", got, want)
	}
	got = EALArgs(" --no-huge  --vdev=net_null0 ", 7)
	if !slices.Equal(got, []string{"--no-huge", "--vdev=net_null0", "--file-prefix", "rsock-7"}) {
		t.Fatalf("given: %q", got)
	}
	got = EALArgs("--file-prefix=mine -l 0", 7)
	if !slices.Equal(got, []string{"--file-prefix=mine", "-l", "0"}) {
		t.Fatalf("own prefix: %q", got)
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv(EnvIP, "")
	if _, err := ConfigFromEnv(); err == nil {
		t.Fatal("no address accepted")
	}
	t.Setenv(EnvIP, "192.0.2.1")
	if _, err := ConfigFromEnv(); err == nil {
		t.Fatal("address without prefix accepted")
	}
	t.Setenv(EnvIP, "192.0.2.1/24")
	t.Setenv(EnvGateway, "192.0.2.254")
	t.Setenv(EnvMTU, "4200")
	t.Setenv(EnvPort, "net_memif0,role=client")
	c, err := ConfigFromEnv()
	if err != nil || c.Local != netip.MustParsePrefix("192.0.2.1/24") || c.Gateway != netip.MustParseAddr("192.0.2.254") ||
		c.MTU != 4200 || c.Port != "net_memif0,role=client" {
		t.Fatalf("%+v, %v", c, err)
	}
	if _, err := c.withDefaults(); err != nil {
		t.Fatal(err)
	}
	c.Gateway = netip.MustParseAddr("198.51.100.1")
	if _, err := c.withDefaults(); err == nil {
		t.Fatal("off-link gateway accepted")
	}
	t.Setenv(EnvMTU, "big")
	if _, err := ConfigFromEnv(); err == nil {
		t.Fatal("bad MTU accepted")
	}
}

func TestNextHop(t *testing.T) {
	local := netip.MustParsePrefix("192.0.2.1/24")
	gw := netip.MustParseAddr("192.0.2.254")
	for _, c := range []struct {
		dst, gw, want string
		ok            bool
	}{
		{"192.0.2.7", "", "192.0.2.7", true},
		{"::ffff:192.0.2.7", "", "192.0.2.7", true},
		{"198.51.100.1", "", "", false},
		{"198.51.100.1", gw.String(), gw.String(), true},
		{"2001:db8::1", gw.String(), "", false},
	} {
		var g netip.Addr
		if c.gw != "" {
			g = netip.MustParseAddr(c.gw)
		}
		got, ok := nextHop(local, g, netip.MustParseAddr(c.dst))
		if ok != c.ok || (ok && got != netip.MustParseAddr(c.want)) {
			t.Errorf("%s via %q: %v %v", c.dst, c.gw, got, ok)
		}
	}
}

func TestPortDevargs(t *testing.T) {
	for _, c := range []struct {
		spec string
		mtu  int
		want string
	}{
		{"net_memif0,role=client", 9000, "net_memif0,role=client,bsize=9216"},
		{"net_memif0", 4000, "net_memif0,bsize=9216"},
		{"net_memif0,role=client", 1500, "net_memif0,role=client"},
		{"net_memif0,role=client", 0, "net_memif0,role=client"},
		{"net_memif0,bsize=4096,role=client", 9000, "net_memif0,bsize=4096,role=client"},
		{"net_af_packet0,iface=veth0", 9000, "net_af_packet0,iface=veth0,framesz=16384,blocksz=16384"},
		{"net_af_packet0,iface=veth0", 4200, "net_af_packet0,iface=veth0,framesz=8192,blocksz=8192"},
		{"net_af_packet0,iface=veth0", 1500, "net_af_packet0,iface=veth0"},
		{"net_af_packet0,iface=veth0,framesz=4096", 4000, "net_af_packet0,iface=veth0,framesz=4096"},
		{"", 9000, ""},
	} {
		if got := portDevargs(c.spec, c.mtu); got != c.want {
			t.Errorf("portDevargs(%q, %d) = %q, want %q", c.spec, c.mtu, got, c.want)
		}
	}
}
