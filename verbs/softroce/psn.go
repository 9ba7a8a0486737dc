package softroce

import "github.com/rsock-go/rsock/verbs/softroce/wire"

// PSNs are 24-bit sequence numbers compared modulo 2^24 (IBA 9.7.1).

// psnAdd returns p+n modulo 2^24.
func psnAdd(p, n uint32) uint32 { return (p + n) & wire.PSNMask }

// psnDiff returns a-b as a signed distance in (-2^23, 2^23].
func psnDiff(a, b uint32) int32 { return int32((a-b)<<8) >> 8 }
