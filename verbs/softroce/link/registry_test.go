package link

import (
	"errors"
	"slices"
	"testing"
)

func TestRegistry(t *testing.T) {
	errTest := errors.New("test opener")
	if _, ok := Lookup("registry-test"); ok {
		t.Fatal("found before registration")
	}
	Register("registry-test", func(OpenConfig) (Link, error) { return nil, errTest })
	t.Cleanup(func() {
		links.Lock()
		delete(links.m, "registry-test")
		links.Unlock()
	})
	open, ok := Lookup("registry-test")
	if !ok {
		t.Fatal("not found after registration")
	}
	if _, err := open(OpenConfig{}); !errors.Is(err, errTest) {
		t.Fatalf("opener returned %v", err)
	}
	if !slices.Contains(Registered(), "registry-test") {
		t.Fatalf("Registered() = %v", Registered())
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a second registration of a name did not panic")
		}
	}()
	Register("registry-test", nil)
}
