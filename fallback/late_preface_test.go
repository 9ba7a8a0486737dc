package fallback

import (
	"errors"
	"io"
	"syscall"
	"testing"
	"time"
)

// TestListenerLatePrefaceResets: a dialer whose preface arrives after the
// sniff gave up (on a lossy path, a lost segment is sent again after
// TCP's 200 ms minimum RTO) is reset; the application never reads the
// handshake as data.
func TestListenerLatePrefaceResets(t *testing.T) {
	tl := newTestListener(t, ListenerConfig{SniffTimeout: 50 * time.Millisecond})
	c := dial(t, tl)
	r := tl.next(t, 5*time.Second) // accepted as a silent plain client
	if r.a.Hello != nil {
		t.Fatal("a silent client has a hello")
	}
	hello := AppendHello(nil, testHello())
	if _, err := c.Write(append(Preface[:], hello...)); err != nil {
		t.Fatal(err)
	}
	r.a.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, err := r.a.Conn.Read(buf)
	if n != 0 || !errors.Is(err, ErrLatePreface) || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("application read %q, %v; want nothing and ErrLatePreface", buf[:n], err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(buf); !errors.Is(err, syscall.ECONNRESET) && err != io.EOF {
		t.Fatalf("dialer read after the reset: %v, want ECONNRESET", err)
	}
}

// TestListenerLatePlainBytes: a plain client that speaks after the sniff
// timeout has its bytes returned whole, including ones that begin like
// the preface, and in reads of any size.
func TestListenerLatePlainBytes(t *testing.T) {
	for _, tc := range []struct{ name, first, rest string }{
		{"plain", "GET / HTTP/1.1\r\n", "Host: x\r\n\r\n"},
		{"preface start", "RSOCK", "? no, plain\r\n"},
		{"one byte", "R", "SOCK-like but not\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := newTestListener(t, ListenerConfig{SniffTimeout: 30 * time.Millisecond})
			c := dial(t, tl)
			r := tl.next(t, 5*time.Second)
			if _, err := c.Write([]byte(tc.first)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // a separate segment
			if _, err := c.Write([]byte(tc.rest)); err != nil {
				t.Fatal(err)
			}
			want := tc.first + tc.rest
			got := make([]byte, 0, len(want))
			r.a.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			for len(got) < len(want) {
				var b [3]byte // small reads cross the checked bytes
				n, err := r.a.Conn.Read(b[:])
				got = append(got, b[:n]...)
				if err != nil {
					t.Fatalf("after %q: %v", got, err)
				}
			}
			if string(got) != want {
				t.Fatalf("read %q, want %q", got, want)
			}
		})
	}
}

// TestGuardedConnDeadline: a read deadline on a guarded conn with nothing
// to read expires as usual, and the guard still checks the bytes after it.
func TestGuardedConnDeadline(t *testing.T) {
	tl := newTestListener(t, ListenerConfig{SniffTimeout: 20 * time.Millisecond})
	c := dial(t, tl)
	r := tl.next(t, 5*time.Second)
	r.a.Conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var b [16]byte
	if _, err := r.a.Conn.Read(b[:]); !isTimeout(err) {
		t.Fatalf("read with nothing sent: %v, want a timeout", err)
	}
	c.Write(Preface[:])
	r.a.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.a.Conn.Read(b[:]); !errors.Is(err, ErrLatePreface) {
		t.Fatalf("read of a late preface after a timeout: %v, want ErrLatePreface", err)
	}
}
