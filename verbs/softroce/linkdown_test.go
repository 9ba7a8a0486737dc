package softroce

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// failingLink is a link whose Recv fails for good once fail is called, as
// a memif link does when its peer disconnects.
type failingLink struct {
	link.Link
	once sync.Once
	dead chan struct{}
}

var errLinkGone = errors.New("test: the link's peer is gone")

func (l *failingLink) fail() { l.once.Do(func() { close(l.dead) }) }

func (l *failingLink) Recv(pkts []link.Packet) (int, error) {
	select {
	case <-l.dead:
		return 0, errLinkGone
	default:
	}
	// The inner Recv blocks; a failure is noticed at its next return,
	// which the peer's retransmissions bring about.
	n, err := l.Link.Recv(pkts)
	select {
	case <-l.dead:
		return 0, errLinkGone
	default:
	}
	return n, err
}

// TestLinkDownFailsQPs: when the link fails for good (its receive loop
// ends without Close), the QP fails at once with a Cause naming the
// link's failure, instead of after its retries ran out.
func TestLinkDownFailsQPs(t *testing.T) {
	o := pairOpts{timeout: 20} // retries alone would take over 4 s each
	o.defaults()
	la, lb := pipeLinks.make(t, noFaults)
	fl := &failingLink{Link: la, dead: make(chan struct{})}
	a := newNode(t, fl, o)
	b := newNode(t, lb, o)
	connect(t, a, b, o)
	b.postRecv(1, 0, 64)
	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.sge(0, 64)}, Flags: verbs.SendSignaled})
	expectWC(t, a.scq, 1, verbs.WCSend, verbs.WCSuccess)

	fl.fail()
	start := time.Now()
	// b's next request brings a's pending Recv back, which then fails.
	a.postRecv(2, 0, 64)
	b.postSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{b.sge(0, 64)}, Flags: verbs.SendSignaled})
	wc := waitWC(t, a.rcq, 2*time.Second)
	if wc.Status == verbs.WCSuccess {
		wc = waitWC(t, a.rcq, 2*time.Second) // the SEND landed before the failure was seen
	}
	if wc.Status != verbs.WCWRFlushErr {
		t.Fatalf("receive completion %v, want a flush error", wc.Status)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the QP failed %v after the link", d)
	}
	if a.qp.State() != verbs.QPSErr {
		t.Fatalf("QP state %v, want ERR", a.qp.State())
	}
	if c := a.qp.Cause(); c == nil || !errors.Is(c, errLinkGone) || !strings.Contains(c.Error(), "link failed") {
		t.Fatalf("Cause %v, want the link's failure", c)
	}
}
