// Package scale holds many rsock connections between two processes: the
// test binary re-executes itself as a server process, and the test dials
// it -scale.conns times, waits until every connection is accepted, sends
// 4 KiB on each and checks the echo, then closes them all and checks that
// the server is back where it started (file descriptors, goroutines, no
// device left). It has tests only.
//
// The server reports, while it holds every connection, its RSS (VmRSS and
// VmHWM), Go heap, file descriptors, goroutines, devices and registered
// bytes, and its accept rate; the test logs them with the client's, per
// connection, and how many connections ended on RDMA and how many on TCP
// (and why).
//
// The link is the library's default, auto, which on one host is shm
// (-scale.link): one shm channel serves every connection between the two
// processes. An shm connection closes its TCP control socket once the
// handshake is done and holds no goroutine and no descriptor of its own
// (the channel's doorbells are one eventfd per side; the test checks the
// goroutines). -scale.link=udp runs the udp
// link, whose devices are shared by all connections of a process (one
// descriptor per connection); -scale.link=memif shows memif's cap of 64
// links per process, past which connections go to TCP.
//
// The default run holds 200 connections so that CI stays fast; the run of
// the README's numbers is
//
//	go test ./test/scale/ -run TestScale -v -timeout 30m -scale.conns=10000
//
// Under -race, which caps a process at 8128 live goroutines, a run on the
// udp or memif link holds at most 4000 connections: each holds one
// goroutine (its control connection's reader) on either side.
package scale
