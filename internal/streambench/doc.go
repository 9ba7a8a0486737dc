// Package streambench measures byte streams over rsock (package netconn)
// against plain TCP, side by side: one-way stream throughput, ping-pong
// round-trip latency and CPU time per gigabyte on both sides, for a sweep
// of message sizes and connection counts. It is the engine of the
// rsockbench local, server and client subcommands.
//
// A server listens twice: with netconn on its main address, where rsock
// dialers get RDMA, and with plain package net on a second address, the
// TCP baseline. A client opens a control connection to the main address
// and, for each measurement, tells the server what is coming (Start),
// opens the measurement's data connections to one of the two addresses,
// each introduced by a DataHeader, and runs the traffic; the server
// answers with what it received and the CPU time it spent (Report). The
// control frames are small, versioned and length-limited; see ReadFrame.
//
// With verification on, every data connection carries a deterministic
// pseudo-random stream (see Pattern) seeded from the Start message, and
// the server checks every byte, reporting the first mismatch with its
// offset (MismatchError).
package streambench
