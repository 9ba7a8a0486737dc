// Package hostile aims forged RoCEv2 packets at live rsock streams and
// checks that nothing outside the rules gets in. It has tests only.
//
// Two streams' devices live in two network namespaces joined by a veth
// (package internal/netlab), or on loopback where namespaces cannot be
// made; a raw IPv4 socket in each peer's namespace forges packets toward
// the other end: random bytes, requests and responses with guessed QPNs,
// PSNs and rkeys, READs and WRITEs outside the advertised ring, floods of
// duplicates, and packets that claim the peer's address and port, each
// with a correct ICRC and with a wrong one. While they arrive, a
// deterministic pattern flows both ways, and the tests check that every
// byte arrives intact, that a registered canary buffer nobody advertised
// stays untouched, and that each kind of forged packet moved the counter
// that says why it was dropped. They need root (raw sockets); without it
// they skip, saying why. -hostile.loopback runs them on loopback even where
// namespaces can be made.
//
// Hostile handshakes (handshake_test.go): clients and servers that speak
// rsock's handshake by hand and lie in their Hello: a RoCE address that is
// not theirs (a victim's UDP socket must receive nothing, IPv4 and IPv6,
// both ways), a memif offer from another host (the listener must connect
// to nothing), and offers that probe the server's files (the Decline must
// say the same, and nothing local, whatever went wrong).
//
// The default run keeps to well under a minute; -hostile.soak sends
// fifty times as many packets over a longer transfer:
//
//	go test ./test/hostile/ -v -hostile.soak -timeout 30m
package hostile
