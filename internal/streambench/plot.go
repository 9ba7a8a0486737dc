package streambench

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Plot geometry, in SVG user units.
const (
	panelW, panelH = 520, 400
	marginL        = 70
	marginR        = 20
	marginT        = 40
	marginB        = 90 // room for the x label and the legend
)

// series is one line of a panel: a transport at a connection count.
type series struct {
	transport string
	conns     int
	pts       [][2]float64 // size, value
}

// WritePlot writes an SVG image of two panels side by side: stream
// throughput (GB/s) and ping-pong p50 round-trip latency (µs, log scale)
// against message size (log scale), one line per transport and
// connection count.
func WritePlot(w io.Writer, recs []*Record) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		2*panelW, panelH, 2*panelW, panelH)
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="white"/>`+"\n", 2*panelW, panelH)
	panel(bw, 0, "Stream throughput", "GB/s", false, collect(recs, ModeStream, func(r *Record) float64 { return r.GBps }))
	panel(bw, panelW, "Ping-pong latency (p50 round trip)", "µs", true, collect(recs, ModePingPong, func(r *Record) float64 { return r.P50Us }))
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

// collect gathers the series of one mode.
func collect(recs []*Record, mode string, value func(*Record) float64) []*series {
	var ss []*series
	for _, r := range recs {
		if r.Mode != mode {
			continue
		}
		i := slices.IndexFunc(ss, func(s *series) bool { return s.transport == r.Transport && s.conns == r.Conns })
		if i < 0 {
			ss = append(ss, &series{transport: r.Transport, conns: r.Conns})
			i = len(ss) - 1
		}
		ss[i].pts = append(ss[i].pts, [2]float64{float64(r.Size), value(r)})
	}
	slices.SortFunc(ss, func(a, b *series) int {
		if c := strings.Compare(b.transport, a.transport); c != 0 { // tcp first
			return c
		}
		return a.conns - b.conns
	})
	for _, s := range ss {
		slices.SortFunc(s.pts, func(a, b [2]float64) int { return int(a[0] - b[0]) })
	}
	return ss
}

var (
	colors = map[string]string{TransportRsock: "#1f77b4", TransportTCP: "#ff7f0e"}
	dashes = []string{"", "6,4", "2,3", "10,3,2,3"}
)

// esc escapes text for SVG.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// panel draws one chart with its left edge at x0.
func panel(w io.Writer, x0 int, title, unit string, logY bool, ss []*series) {
	left, right := float64(x0+marginL), float64(x0+panelW-marginR)
	top, bottom := float64(marginT), float64(panelH-marginB)
	fmt.Fprintf(w, `<g>`+"\n")
	fmt.Fprintf(w, `<text x="%s" y="22" text-anchor="middle" font-size="15" font-weight="bold">%s</text>`+"\n", num((left+right)/2), esc(title))
	fmt.Fprintf(w, `<rect x="%s" y="%s" width="%s" height="%s" fill="none" stroke="#333"/>`+"\n", num(left), num(top), num(right-left), num(bottom-top))

	var xs, ys []float64
	for _, s := range ss {
		for _, p := range s.pts {
			xs = append(xs, p[0])
			if !logY || p[1] > 0 {
				ys = append(ys, p[1])
			}
		}
	}
	if len(xs) == 0 || len(ys) == 0 {
		fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle" fill="#666">no data</text>`+"\n", num((left+right)/2), num((top+bottom)/2))
		fmt.Fprintln(w, `</g>`)
		return
	}
	// x: log2 of the size, padded half a step on each side.
	xmin, xmax := math.Log2(slices.Min(xs))-0.5, math.Log2(slices.Max(xs))+0.5
	xpos := func(size float64) float64 { return left + (math.Log2(size)-xmin)/(xmax-xmin)*(right-left) }
	// y: linear from 0 with a rounded top, or log10 over whole decades.
	var ymin, ymax float64
	var yticks []float64
	if logY {
		ymin, ymax = math.Floor(math.Log10(slices.Min(ys))), math.Ceil(math.Log10(slices.Max(ys)))
		if ymax <= ymin {
			ymax = ymin + 1
		}
		for e := ymin; e <= ymax; e++ {
			yticks = append(yticks, math.Pow(10, e))
		}
	} else {
		step := niceStep(slices.Max(ys) / 5)
		ymax = step * math.Ceil(slices.Max(ys)/step)
		if ymax == 0 {
			ymax, step = 1, 0.2
		}
		for v := 0.0; v <= ymax+step/2; v += step {
			yticks = append(yticks, v)
		}
	}
	ypos := func(v float64) float64 {
		if logY {
			return bottom - (math.Log10(v)-ymin)/(ymax-ymin)*(bottom-top)
		}
		return bottom - v/ymax*(bottom-top)
	}
	for _, v := range yticks {
		y := ypos(v)
		fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#ddd"/>`+"\n", num(left), num(y), num(right), num(y))
		fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="end">%s</text>`+"\n", num(left-6), num(y+4), esc(strconv.FormatFloat(v, 'g', 4, 64)))
	}
	sizes := slices.Compact(slices.Sorted(slices.Values(xs)))
	for _, sz := range sizes {
		x := xpos(sz)
		fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#ddd"/>`+"\n", num(x), num(top), num(x), num(bottom))
		fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(x), num(bottom+16), esc(FormatSize(int(sz))))
	}
	fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle">message size (log scale)</text>`+"\n", num((left+right)/2), num(bottom+34))
	fmt.Fprintf(w, `<text transform="translate(%d %s) rotate(-90)" text-anchor="middle">%s</text>`+"\n", x0+16, num((top+bottom)/2), esc(unit+map[bool]string{true: " (log scale)", false: ""}[logY]))

	conns := map[int]int{} // conns → dash index
	for _, s := range ss {
		if _, ok := conns[s.conns]; !ok {
			conns[s.conns] = len(conns) % len(dashes)
		}
	}
	for i, s := range ss {
		color := colors[s.transport]
		dash := ""
		if d := dashes[conns[s.conns]]; d != "" {
			dash = ` stroke-dasharray="` + d + `"`
		}
		var pts []string
		for _, p := range s.pts {
			if logY && p[1] <= 0 {
				continue
			}
			pts = append(pts, num(xpos(p[0]))+","+num(ypos(p[1])))
		}
		fmt.Fprintf(w, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), color, dash)
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(w, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], color)
		}
		// Legend entries below the axis label, two to a row.
		lx := left + float64(i%2)*(right-left)/2
		ly := bottom + 54 + float64(i/2)*16
		fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"%s/>`+"\n", num(lx), num(ly-4), num(lx+28), num(ly-4), color, dash)
		fmt.Fprintf(w, `<text x="%s" y="%s">%s</text>`+"\n", num(lx+34), num(ly), esc(fmt.Sprintf("%s, %d conn%s", s.transport, s.conns, map[bool]string{true: "s", false: ""}[s.conns != 1])))
	}
	fmt.Fprintln(w, `</g>`)
}

// niceStep rounds a step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}
