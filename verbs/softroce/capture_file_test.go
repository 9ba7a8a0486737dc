package softroce

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestCreateCaptureFresh: the capture file is created with mode 0600 even
// where an earlier file of the same owner had another mode and content; a
// symbolic link in its place is refused and its target left untouched.
func TestCreateCaptureFresh(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0)
	defer syscall.Umask(old)

	path := filepath.Join(dir, "cap.pcap")
	if err := os.WriteFile(path, []byte("an earlier file"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := CreateCapture(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(path); len(b) != 24 { // the pcap file header alone
		t.Errorf("%d bytes: %q", len(b), b)
	}

	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.pcap")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if c, err := CreateCapture(link, 0); err == nil {
		c.Close()
		t.Fatal("a capture was created through a symbolic link")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the link's target changed to %q", b)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode().Type() != fs.ModeSymlink {
		t.Errorf("the link was replaced: %v, %v", fi, err)
	}
	dangling := filepath.Join(dir, "dangling.pcap")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	if c, err := CreateCapture(dangling, 0); err == nil {
		c.Close()
		t.Fatal("a capture was created through a dangling symbolic link")
	}
	if _, err := os.Stat(filepath.Join(dir, "nowhere")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dangling link's target was created: %v", err)
	}
}
