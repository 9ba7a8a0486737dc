package verbs

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
)

func TestRegisterProvider(t *testing.T) {
	const name = "registry-test"
	if _, ok := LookupProvider(name); ok {
		t.Fatalf("%s registered before the test", name)
	}
	RegisterProvider(name, func(netip.Addr) (Device, error) { return nil, ErrNoDevice })
	t.Cleanup(func() {
		providers.Lock()
		delete(providers.open, name)
		providers.Unlock()
	})
	open, ok := LookupProvider(name)
	if !ok {
		t.Fatal("registered provider not found")
	}
	if _, err := open(netip.MustParseAddr("127.0.0.1")); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("open returned %v, want ErrNoDevice", err)
	}
	if !slices.Contains(Providers(), name) {
		t.Fatalf("Providers() = %v, lacks %s", Providers(), name)
	}
	for _, bad := range []struct {
		what string
		name string
		open OpenFunc
	}{
		{"duplicate", name, open},
		{"empty name", "", open},
		{"nil open", "other", nil},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: RegisterProvider did not panic", bad.what)
				}
			}()
			RegisterProvider(bad.name, bad.open)
		}()
	}
}

func TestErrNoRDMA(t *testing.T) {
	err := fmt.Errorf("provider: %w", ErrNoRDMA)
	if !errors.Is(err, ErrNoRDMA) || !errors.Is(err, ErrNoDevice) {
		t.Fatalf("%v does not match ErrNoRDMA and ErrNoDevice", err)
	}
	if errors.Is(fmt.Errorf("provider: %w", ErrNoDevice), ErrNoRDMA) {
		t.Fatal("ErrNoDevice matches ErrNoRDMA")
	}
}
