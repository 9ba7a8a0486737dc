//go:build linux

package rsock

import (
	"sync"
	"testing"
)

// BenchmarkBothWaysConcurrent moves 1 MiB writes both ways at once over
// one stream pair on loopback UDP: on each stream a writer and a reader
// run concurrently, so a Write posting its data and a Read consuming and
// returning credits contend for the same stream. One op is 1 MiB each way.
//
//	go test -run '^$' -bench BothWaysConcurrent -benchtime 256x -count 5 ./rsock/
func BenchmarkBothWaysConcurrent(b *testing.B) {
	da, db := devPair(b)
	sa, sb := streamPair(b, da, db, Config{})
	defer sa.Close()
	defer sb.Close()
	const chunk = 1 << 20
	b.SetBytes(2 * chunk)
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for _, p := range [][2]*Stream{{sa, sb}, {sb, sa}} {
		w, r := p[0], p[1]
		wg.Add(2)
		go func() {
			defer wg.Done()
			buf := make([]byte, chunk)
			for range b.N {
				if _, err := w.Write(buf); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			for left := b.N * chunk; left > 0; {
				n, err := r.Read(buf[:min(len(buf), left)])
				if err != nil {
					errs <- err
					return
				}
				left -= n
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
