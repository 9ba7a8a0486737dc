package softroce

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// narrowLink is a link whose path carries packets of at most max bytes:
// it drops larger ones and reports EMSGSIZE, as a UDP socket does once the
// interface's MTU shrank.
type narrowLink struct {
	link.Link
	max int
}

func (l *narrowLink) Send(pkts []link.Packet) error {
	var fit []link.Packet
	var err error
	for _, p := range pkts {
		if p.N > l.max {
			if err == nil {
				err = fmt.Errorf("narrow: packet of %d bytes: %w", p.N, syscall.EMSGSIZE)
			}
			continue
		}
		fit = append(fit, p)
	}
	if serr := l.Link.Send(fit); serr != nil {
		return serr
	}
	return err
}

// TestSendErrorFailsQP: a packet the link cannot send for its size fails
// the QP at once with a local length error whose cause is EMSGSIZE, and is
// counted; it is not dropped silently to be retried until the retries run
// out.
func TestSendErrorFailsQP(t *testing.T) {
	o := pairOpts{mtu: verbs.MTU4096}
	o.defaults()
	la, lb := pipeLinks.make(t, noFaults)
	a := newNode(t, &narrowLink{Link: la, max: 2000}, o)
	b := newNode(t, lb, o)
	connect(t, a, b, o)

	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, 1000)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess) // small packets pass
	a.postSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, 4096)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	wc := waitWC(t, a.scq, 2*time.Second)
	if wc.WRID != 2 || wc.Status != verbs.WCLocLenErr {
		t.Fatalf("completion %+v, want WR 2 with %v", wc, verbs.WCLocLenErr)
	}
	if err := a.qp.Cause(); !errors.Is(err, syscall.EMSGSIZE) {
		t.Errorf("Cause() = %v, want EMSGSIZE", err)
	}
	if c := a.dev.Counters(); c.SendErrors == 0 {
		t.Errorf("SendErrors = 0 after a send failed: %+v", c)
	}
	if a.qp.State() != verbs.QPSErr {
		t.Errorf("QP state %v, want ERR", a.qp.State())
	}
}
