package fallback

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

// checkDecodeErr fails unless err is one of the documented classes.
func checkDecodeErr(t *testing.T, err error, allowNotRsock bool) {
	t.Helper()
	switch {
	case errors.Is(err, ErrMalformed), errors.Is(err, ErrVersion), errors.Is(err, io.ErrUnexpectedEOF):
	case allowNotRsock && errors.Is(err, ErrNotRsock):
	default:
		t.Fatalf("unclassified error: %v", err)
	}
}

func FuzzReadHello(f *testing.F) {
	for _, h := range extremeHellos() {
		f.Add(AppendHello(nil, h))
	}
	ext := AppendHello(nil, testHello())
	ext = append(ext, 9, 9, 9)
	ext[7] += 3
	f.Add(ext)
	f.Add([]byte{})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{magic0, magic1, 0, 1, 1, 0, 0xFF, 0xFF})
	f.Add(Preface[:])
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		h, err := ReadHello(r)
		if err != nil {
			checkDecodeErr(t, err, false)
			return
		}
		if consumed := len(data) - r.Len(); consumed > MaxFrameSize {
			t.Fatalf("consumed %d bytes", consumed)
		}
		if err := h.Validate(); err != nil {
			t.Fatalf("decoded an invalid hello: %v", err)
		}
		enc := AppendHello(nil, h)
		h2, err := ReadHello(bytes.NewReader(enc))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(h, h2) {
			t.Fatalf("round trip:\n%+v\n%+v", h, h2)
		}
		if !bytes.Equal(AppendHello(nil, h2), enc) {
			t.Fatal("encoding not stable")
		}
	})
}

func FuzzReadReply(f *testing.F) {
	for _, h := range extremeHellos() {
		f.Add(AppendReply(nil, &Reply{Accept: true, Hello: h}))
	}
	f.Add(AppendReply(nil, Decline("no provider")))
	f.Add(AppendReply(nil, &Reply{}))
	f.Add([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"))
	f.Add([]byte{})
	f.Add([]byte{magic0, magic1, 0, 1, 2, 0, 0xFF, 0xFF})
	f.Add(AppendHello(nil, testHello()))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		rep, err := ReadReply(r)
		if err != nil {
			checkDecodeErr(t, err, true)
			return
		}
		if consumed := len(data) - r.Len(); consumed > MaxFrameSize {
			t.Fatalf("consumed %d bytes", consumed)
		}
		if err := rep.Validate(); err != nil {
			t.Fatalf("decoded an invalid reply: %v", err)
		}
		enc := AppendReply(nil, rep)
		rep2, err := ReadReply(bytes.NewReader(enc))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(rep, rep2) {
			t.Fatalf("round trip:\n%+v\n%+v", rep, rep2)
		}
	})
}
