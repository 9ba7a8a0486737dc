package netlab

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The nftables table of an endpoint: a netdev table whose ingress chain
// on the endpoint's veth first counts every frame (counter "seen") and
// then drops the share DropIngress set (counter "dropped"). Named
// counters outlive the rules, which DropIngress replaces.
const nftTable = "netlab"

// nftInit creates ns's table, with no drop rule.
func (l *Lab) nftInit(ns *Namespace) error {
	script := fmt.Sprintf(`table netdev %[1]s {
	counter seen {
	}
	counter dropped {
	}
	chain ingress {
		type filter hook ingress device %[2]s priority 0; policy accept;
		counter name "seen"
	}
}
`, nftTable, ns.Dev)
	return nftScript(ns, script)
}

// DropIngress makes ns (A or B) drop perMille of every 1000 frames that
// arrive on its veth, chosen at random (nftables numgen random): 1 is
// 0.1%, 1000 drops every frame (an outage), 0 drops none. Frames from
// both rsock and TCP, data and acknowledgements, ARP and neighbour
// discovery all count: loss one way is DropIngress on the receiver,
// loss both ways on both ends.
func (l *Lab) DropIngress(ns *Namespace, perMille int) error {
	if perMille < 0 || perMille > 1000 {
		return fmt.Errorf("netlab: drop %d per mille not in [0, 1000]", perMille)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "flush chain netdev %s ingress\n", nftTable)
	fmt.Fprintf(&b, "add rule netdev %s ingress counter name \"seen\"\n", nftTable)
	switch {
	case perMille == 1000:
		fmt.Fprintf(&b, "add rule netdev %s ingress counter name \"dropped\" drop\n", nftTable)
	case perMille > 0:
		fmt.Fprintf(&b, "add rule netdev %s ingress numgen random mod 1000 < %d counter name \"dropped\" drop\n", nftTable, perMille)
	}
	return nftScript(ns, b.String())
}

// IngressCounts returns the frames that have arrived on ns's veth since
// the lab was made, and how many of them DropIngress rules dropped.
func (l *Lab) IngressCounts(ns *Namespace) (seen, dropped uint64, err error) {
	// Both from one listing: read by two nft runs, a frame arriving
	// between them (IPv6 neighbour discovery) counted in one and not the
	// other.
	out, err := ns.Run("nft", "list", "counters", "table", "netdev", nftTable)
	if err != nil {
		return 0, 0, err
	}
	counts := map[string]uint64{}
	for _, m := range counterRE.FindAllStringSubmatch(out, -1) {
		if counts[m[1]], err = strconv.ParseUint(m[2], 10, 64); err != nil {
			return 0, 0, err
		}
	}
	for _, name := range []string{"seen", "dropped"} {
		if _, ok := counts[name]; !ok {
			return 0, 0, fmt.Errorf("netlab: no packet count for counter %s in nft's listing of %s: %q", name, ns.Name, out)
		}
	}
	return counts["seen"], counts["dropped"], nil
}

// counterRE finds each counter's name and packets in nft's listing.
var counterRE = regexp.MustCompile(`counter (\w+)\s*\{\s*packets (\d+)`)

// nftScript loads an nft script into ns.
func nftScript(ns *Namespace, script string) error {
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	cmd := ns.Command(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f in %s: %v: %s\nscript:\n%s", ns.Name, err, bytes.TrimSpace(out), script)
	}
	return nil
}
