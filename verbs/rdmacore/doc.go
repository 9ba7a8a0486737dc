// Package rdmacore is the verbs provider over rdma-core's libibverbs: rsock
// on real RDMA devices (RNICs such as ConnectX, and the kernel's rxe and
// siw), through cgo.
//
// It is built only with the build tag rdmacore (and cgo, linking
// -libverbs from libibverbs-dev); without the tag the package is empty and
// the default build stays pure Go. Importing it registers the provider
// "rdmacore" with verbs.RegisterProvider, so netconn finds it without
// importing it: binaries that want it blank-import it in a file behind the
// same tag.
//
// The mapping is thin: Device is an ibv_context opened for one local IP
// address (port 1, the RoCEv2 GID of that address first in its GID view),
// PD, MR (ibv_reg_mr over memory from verbs.AllocBuffer), CQ (ibv_cq with
// a completion channel whose non-blocking fd is waited through Go's
// runtime poller, so a blocked reader parks a goroutine, not an OS
// thread) and RC QP (ibv_modify_qp checked against the transition table
// every provider shares, verbs.CheckTransition). Posting and polling cost
// one cgo call per batch of work requests or completions: the C wrappers
// in cgo.go build the ibv_send_wr chain from flat structs on the C side,
// and convert a batch of ibv_wc into flat structs.
package rdmacore
