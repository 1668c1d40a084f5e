package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var b bytes.Buffer
	in := []Frame{
		{Type: Stdout, Stream: 7, Data: []byte("hello")},
		{Type: Stdin, Stream: 7, Data: []byte{}},
	}
	for _, f := range in {
		if err := Write(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteJSON(&b, Exit, 7, ExitStatus{Code: 3}); err != nil {
		t.Fatal(err)
	}
	for _, want := range in {
		got, err := Read(&b)
		if err != nil || got.Type != want.Type || got.Stream != want.Stream || !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("got %+v, %v; want %+v", got, err, want)
		}
	}
	f, err := Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	var st ExitStatus
	if err := Decode(f, &st); err != nil || st.Code != 3 {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := Read(&b); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

func TestReadRefuses(t *testing.T) {
	hdr := func(n uint32, typ byte, payload string) []byte {
		return append([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n), typ, 0, 0, 0, 1}, payload...)
	}
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"unknown type", hdr(0, 99, ""), "unknown type 99"},
		{"type zero", hdr(0, 0, ""), "unknown type 0"},
		{"over the limit", hdr(MaxData+1, byte(Stdout), ""), "over 1048576"},
		{"truncated payload", hdr(10, byte(Stdout), "abc"), "unexpected EOF"},
		{"truncated header", []byte{0, 0, 0}, "unexpected EOF"},
		{"control not an object", hdr(2, byte(Exit), "[]"), "does not carry a JSON object"},
		{"control not JSON", hdr(3, byte(Exit), "{x}"), "does not carry a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(bytes.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

func TestDecodeRefusesUnknownFields(t *testing.T) {
	var st ExitStatus
	err := Decode(Frame{Type: Exit, Data: []byte(`{"code":1,"kernel_root":true}`)}, &st)
	if !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), "kernel_root") {
		t.Fatalf("err = %v", err)
	}
	err = Decode(Frame{Type: Exit, Data: []byte(`{"code":1} {"code":2}`)}, &st)
	if !errors.Is(err, ErrFrame) {
		t.Fatalf("two values: %v", err)
	}
}

func TestWriteRefusesOversize(t *testing.T) {
	if err := Write(io.Discard, Frame{Type: Stdin, Data: make([]byte, MaxData+1)}); !errors.Is(err, ErrFrame) {
		t.Fatalf("err = %v", err)
	}
}

// FuzzRead: whatever a guest sends, Read answers a frame or an error,
// never a panic, and never a payload over MaxData; a frame it accepts
// writes back to the same bytes.
func FuzzRead(f *testing.F) {
	var b bytes.Buffer
	WriteJSON(&b, Exit, 1, ExitStatus{Code: 1})
	f.Add(b.Bytes())
	f.Add([]byte{0, 0, 0, 1, 7, 0, 0, 0, 0, 'x'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		for {
			fr, err := Read(r)
			if err != nil {
				return
			}
			if len(fr.Data) > MaxData {
				t.Fatalf("payload %d", len(fr.Data))
			}
			var out bytes.Buffer
			if err := Write(&out, fr); err != nil {
				t.Fatal(err)
			}
			back, err := Read(&out)
			if err != nil || back.Type != fr.Type || back.Stream != fr.Stream || !bytes.Equal(back.Data, fr.Data) {
				t.Fatalf("round trip: %v", err)
			}
			if fr.Type.Control() {
				var st Status
				_ = Decode(fr, &st)
			}
		}
	})
}
