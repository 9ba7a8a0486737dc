package verbs

import "time"

// InlineWriter is implemented by QPs whose provider can carry out an RDMA
// WRITE from ordinary memory during the post, copying the payload
// straight into the peer's memory (verbs/shm maps the peer's regions),
// as IBV_SEND_INLINE with no size limit: no lkey is needed and data may
// be reused as soon as the call returns. RNICs cannot (their inline limit
// is a few hundred bytes), so callers keep a registered path for them.
type InlineWriter interface {
	// PostWriteInline posts one RDMA_WRITE or RDMA_WRITE_WITH_IMM (wr's
	// opcode, ID, flags, immediate, remote address and key; its SGL is
	// ignored) whose payload is data. Errors as PostSend.
	PostWriteInline(wr *SendWR, data []byte) error
}

// KickWaiter is implemented by CQs on which a goroutine can wait for
// completions itself: it polls, then sleeps on a doorbell that the
// producer rings only while someone sleeps, and no goroutine hands
// completions over as Notify does. Kick lets other goroutines wake the
// waiters for their own reasons (a deadline moved, a stream event).
type KickWaiter interface {
	// Kicks returns a counter that each Kick increments; read it before
	// checking the conditions a wait is for.
	Kicks() uint64
	// Kick wakes every goroutine in WaitKick.
	Kick()
	// WaitKick blocks until the CQ may hold a completion, Kicks()
	// differs from seen, or deadline passes (os.ErrDeadlineExceeded; the
	// zero time waits forever). It returns ErrClosed once the CQ is closed.
	WaitKick(seen uint64, deadline time.Time) error
}

// DiscardCloser is implemented by MRs whose Close must preserve the
// memory's contents at a cost (verbs/shm copies a shared region back into
// private pages): CloseDiscard deregisters like Close but leaves the
// contents undefined, for callers about to free the memory.
type DiscardCloser interface {
	CloseDiscard() error
}
