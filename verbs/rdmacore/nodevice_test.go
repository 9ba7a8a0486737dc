//go:build rdmacore

package rdmacore

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/rsock-go/rsock/verbs"
)

// TestRegistered checks that importing the package registers the
// provider, and that its open function fails with ErrNoDevice (not some
// other error) for an address no device has.
func TestRegistered(t *testing.T) {
	if !slices.Contains(verbs.Providers(), ProviderName) {
		t.Fatalf("providers %v lack %s", verbs.Providers(), ProviderName)
	}
	open, _ := verbs.LookupProvider(ProviderName)
	// 192.0.2.1 (TEST-NET-1) is no device's address.
	d, err := open(netip.MustParseAddr("192.0.2.1"))
	if err == nil {
		d.Close()
		t.Fatal("opened a device for 192.0.2.1")
	}
	if !errors.Is(err, verbs.ErrNoDevice) {
		t.Fatalf("open for 192.0.2.1: %v, want ErrNoDevice", err)
	}
	t.Logf("open for 192.0.2.1: %v", err)
}

// TestDeviceList checks that listing never fails on a host without RDMA
// (ENOSYS is no devices) and that every device listed has a name.
func TestDeviceList(t *testing.T) {
	devs, err := DeviceList()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.Name == "" {
			t.Errorf("a device without a name: %+v", d)
		}
	}
	t.Logf("%d devices: %+v", len(devs), devs)
}
