package services

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestReport(t *testing.T) {
	recs := []*Record{
		{Service: "grpc", Transport: "tcp", Callers: 1, Size: 100, ReqPerSec: 1000, P50us: 100, P99us: 400,
			ClientConns: map[string]int{"tcp": 1}, ServerConns: map[string]int{"tcp": 1}},
		{Service: "grpc", Transport: "rsock", Callers: 1, Size: 100, ReqPerSec: 2500, P50us: 40, P99us: 400,
			ClientConns: map[string]int{"rdma/x/y": 1}, ServerConns: map[string]int{"rdma/x/y": 1}},
		{Service: "grpc", Transport: "rsock", Callers: 32, Size: 100, ReqPerSec: 2500,
			ClientConns: map[string]int{"tcp": 1}, ServerConns: map[string]int{"tcp": 1}, Fallbacks: map[string]int{"no device": 2}},
		{Service: "http", Transport: "rsock", Callers: 1, Size: 100, Error: "boom",
			ClientConns: map[string]int{"tcp": 2, "rdma/x/y": 3}, ServerConns: map[string]int{"rdma/x/y": 5}},
	}
	SetRatios(recs)
	if r := recs[1]; r.ReqRatio == nil || *r.ReqRatio != 2.5 || *r.P50Ratio != 0.4 || *r.P99Ratio != 1 {
		t.Errorf("ratios %v %v %v", r.ReqRatio, r.P50Ratio, r.P99Ratio)
	}
	if recs[2].ReqRatio != nil || recs[3].ReqRatio != nil {
		t.Error("a ratio without a tcp point of the same callers, or of a failed point")
	}
	var tab bytes.Buffer
	if err := WriteTable(&tab, recs); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", tab.String())
	for _, want := range []string{"| 2.50× ", "| 0.40× ", "1× rdma/x/y", "failed: boom", "3× rdma/x/y, 2× tcp; server 5× rdma/x/y",
		"rsock fell back to TCP (grpc, 32 callers, first seen): no device"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, recs); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&js)
	n := 0
	for ; sc.Scan(); n++ {
		var back Record
		if err := json.Unmarshal(sc.Bytes(), &back); err != nil {
			t.Fatal(err)
		}
		if back.Transport != recs[n].Transport || back.Callers != recs[n].Callers || (back.ReqRatio == nil) != (recs[n].ReqRatio == nil) {
			t.Errorf("record %d came back as %+v", n, back)
		}
	}
	if n != len(recs) {
		t.Errorf("%d JSON lines for %d records", n, len(recs))
	}
}

// TestReportRounds: rows are medians of the rounds, and the last column
// the range of the rounds' own ratios.
func TestReportRounds(t *testing.T) {
	var recs []*Record
	for round, v := range []struct{ tcp, rsock float64 }{{1000, 2000}, {1200, 3600}, {800, 2000}} {
		for _, p := range []struct {
			tr  string
			rps float64
		}{{"tcp", v.tcp}, {"rsock", v.rsock}} {
			recs = append(recs, &Record{Service: "redis", Transport: p.tr, Callers: 32, Size: 100, Round: round, ReqPerSec: p.rps, P50us: 1e6 / p.rps,
				ClientConns: map[string]int{p.tr: 32}, ServerConns: map[string]int{p.tr: 32}})
		}
	}
	SetRatios(recs)
	rows := Rows(recs)
	if len(rows) != 2 || rows[0].Rounds != 3 || rows[0].ReqPerSec != 1000 || rows[1].ReqPerSec != 2000 ||
		*rows[1].ReqRatio != 2 || *rows[1].ReqRatioLo != 2 || *rows[1].ReqRatioHi != 3 || *rows[1].P50Ratio != 0.5 {
		t.Fatalf("rows %+v %+v", rows[0], rows[1])
	}
	var tab bytes.Buffer
	if err := WriteTable(&tab, recs); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", tab.String())
	for _, want := range []string{"medians of 3 rounds", "| 2.00–3.00× ", "| 2.00× ", "| 32× rsock "} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
}
