//go:build linux

package rsock

import (
	"errors"
	"flag"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var stuckPause = flag.Duration("rsock.stuck", 3*time.Second, "how long the reader of TestStuckReader pauses (the issue's case is 30s)")

// TestStuckReader: a reader stops reading for a while in the middle of a
// transfer. The writer fills the ring and blocks; its write deadlines fire
// with os.ErrDeadlineExceeded, nothing beyond the ring is accepted, the
// heap stays flat, and once the reader reads again every byte arrives
// intact.
func TestStuckReader(t *testing.T) {
	const ringSize = 64 << 10
	const total = 16 << 20
	const pauseAt = 4 << 20
	a, b := devPair(t)
	sa, sb := streamPair(t, a, b, Config{RingSize: ringSize})
	defer sa.Close()
	defer sb.Close()

	var sent atomic.Int64
	var timeouts atomic.Int64
	var wg sync.WaitGroup
	werr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for sent.Load() < total {
			chunk := buf[:min(len(buf), total-int(sent.Load()))]
			fillPattern(chunk, sent.Load())
			for len(chunk) > 0 {
				sa.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
				n, err := sa.Write(chunk)
				sent.Add(int64(n))
				chunk = chunk[n:]
				var ne net.Error
				switch {
				case err == nil:
				case errors.Is(err, os.ErrDeadlineExceeded) && errors.As(err, &ne) && ne.Timeout():
					timeouts.Add(1)
				default:
					werr <- err
					return
				}
			}
		}
		werr <- nil
	}()

	buf := make([]byte, 48<<10)
	read, paused := 0, false
	for read < total {
		if read >= pauseAt && !paused {
			paused = true
			// The pause: let the ring fill, then watch the writer and
			// the heap while nobody reads.
			time.Sleep(300 * time.Millisecond)
			heap0, sent0, to0 := heapInUse(), sent.Load(), timeouts.Load()
			time.Sleep(*stuckPause)
			heap1, sent1, to1 := heapInUse(), sent.Load(), timeouts.Load()
			if d := sent1 - sent0; d > ringSize {
				t.Errorf("the writer got %d bytes in while the reader paused, beyond the %d-byte ring", d, ringSize)
			}
			if to1 == to0 {
				t.Error("no write deadline fired while the reader paused")
			}
			if d := int64(heap1) - int64(heap0); d > 1<<20 {
				t.Errorf("the heap grew by %d bytes while the reader paused", d)
			}
			t.Logf("pause of %v: %d write deadlines fired, %d bytes accepted, heap %+d bytes", *stuckPause, to1-to0, sent1-sent0, int64(heap1)-int64(heap0))
		}
		n, err := sb.Read(buf[:min(len(buf), total-read)])
		if off, ok := checkPattern(buf[:n], int64(read)); !ok {
			t.Fatalf("byte %d differs from the pattern", off)
		}
		read += n
		if err != nil {
			t.Fatalf("read after %d bytes: %v", read, err)
		}
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// heapInUse returns the bytes of heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// patternByte is byte off of the stream TestStuckReader sends.
func patternByte(off int64) byte { return byte(off*7 + off>>11 + off>>19) }

func fillPattern(b []byte, off int64) {
	for i := range b {
		b[i] = patternByte(off + int64(i))
	}
}

// checkPattern reports the offset of the first byte of b, which starts at
// stream offset off, that differs from the pattern.
func checkPattern(b []byte, off int64) (int64, bool) {
	for i, c := range b {
		if c != patternByte(off+int64(i)) {
			return off + int64(i), false
		}
	}
	return 0, true
}
