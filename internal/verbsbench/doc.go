// Package verbsbench runs perftest-style RDMA benchmarks (ib_write_bw,
// ib_write_lat, ib_send_bw, ib_read_bw) between two soft-RoCE devices.
//
// A client and a server meet over a TCP control connection. For each test
// the client sends a Hello frame carrying the test settings and its queue
// pair and memory region; the server opens a device, connects its QP to the
// client's and answers with an Accept frame describing its own; the client
// connects and runs the test; it then sends Done with what it transferred
// and the server answers with a Report of its side (receive completions,
// retransmissions, CPU time). A session may run several tests and ends with
// Bye. The frames are a small versioned binary format, see ReadFrame and
// Params.
//
// Run is the client side of one test, Serve the server side of a session.
// Both take a net.Conn, so tests drive them in-process over a loopback
// connection and the rsockbench command drives them between processes.
package verbsbench
