package s3blobs

import (
	"errors"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want Config
	}{
		{"s3://bucket?endpoint=http://127.0.0.1:9000",
			Config{Endpoint: "http://127.0.0.1:9000", Bucket: "bucket", Region: DefaultRegion}},
		{"s3://my.bucket-1/team/sandbox?endpoint=https://s3.example.com&region=eu-west-3&path-style=true",
			Config{Endpoint: "https://s3.example.com", Bucket: "my.bucket-1", Prefix: "team/sandbox/", Region: "eu-west-3", PathStyle: true}},
		{"s3://bucket/Pre_fix.v2/?endpoint=http://[::1]:9000&path-style=false",
			Config{Endpoint: "http://[::1]:9000", Bucket: "bucket", Prefix: "Pre_fix.v2/", Region: DefaultRegion}},
		{"s3://bucket/?endpoint=http%3A%2F%2Flocalhost%3A7070",
			Config{Endpoint: "http://localhost:7070", Bucket: "bucket", Region: DefaultRegion}},
	} {
		got, err := ParseURL(tc.raw)
		if err != nil || got != tc.want {
			t.Errorf("%s:\n got %+v %v\nwant %+v", tc.raw, got, err, tc.want)
			continue
		}
		if again, err := ParseURL(got.URL()); err != nil || again != got {
			t.Errorf("%s: URL() = %s reads back as %+v %v", tc.raw, got.URL(), again, err)
		}
	}
}

// A bad URL is refused with an error that names the field at fault.
func TestParseURLRefuses(t *testing.T) {
	const ep = "?endpoint=http://127.0.0.1:9000"
	for _, tc := range []struct{ raw, field string }{
		{"", "scheme"},
		{"http://bucket" + ep, "scheme"},
		{"s3:bucket" + ep, "bucket"},
		{"s3://" + ep, "bucket"},
		{"s3:///prefix" + ep, "bucket"},
		{"s3://ab" + ep, "bucket"},
		{"s3://" + strings.Repeat("a", 64) + ep, "bucket"},
		{"s3://Bucket" + ep, "bucket"},
		{"s3://bucket_1" + ep, "bucket"},
		{"s3://-bucket" + ep, "bucket"},
		{"s3://bucket-" + ep, "bucket"},
		{"s3://a..b" + ep, "bucket"},
		{"s3://192.168.1.1" + ep, "bucket"},
		{"s3://bucket:9000" + ep, "bucket"},
		{"s3://key:secret@bucket" + ep, "credentials"},
		{"s3://key:secret@bucket:x" + ep, "syntax"},
		{"s3://bucket:x" + ep, "syntax"},
		{"s3://key:secret@bucket?endpoint=http://u:secret@host", "credentials"},
		{"s3://bucket?endpoint=http://u:secret@host", "endpoint"},
		{"s3://bucket?endpoint=http://u:secret@host:x", "endpoint"},
		{"s3://bucket#frag" + ep, "fragment"},
		{"s3://bucket" + ep + "#", "fragment"},
		{"s3://bucket/a//b" + ep, "prefix"},
		{"s3://bucket//" + ep, "prefix"},
		{"s3://bucket/a/../b" + ep, "prefix"},
		{"s3://bucket/./b" + ep, "prefix"},
		{"s3://bucket/a b" + ep, "prefix"},
		{"s3://bucket/a%2Fb" + ep, "prefix"},
		{"s3://bucket/caf\u00e9" + ep, "prefix"},
		{"s3://bucket/" + strings.Repeat("a", 600) + ep, "prefix"},
		{"s3://bucket", "endpoint"},
		{"s3://bucket?endpoint=", "endpoint"},
		{"s3://bucket?endpoint=127.0.0.1:9000", "endpoint"},
		{"s3://bucket?endpoint=ftp://host", "endpoint"},
		{"s3://bucket?endpoint=http://", "endpoint"},
		{"s3://bucket?endpoint=http://host/path", "endpoint"},
		{"s3://bucket?endpoint=http://host/", "endpoint"},
		{"s3://bucket?endpoint=http://u:p@host", "endpoint"},
		{"s3://bucket?endpoint=http://host:0", "endpoint"},
		{"s3://bucket?endpoint=http://host:65536", "endpoint"},
		{"s3://bucket?endpoint=http://host:", "endpoint"},
		{"s3://bucket?endpoint=HTTP://host", "endpoint"},
		{"s3://bucket?endpoint=http://host%3Fq", "endpoint"},
		{"s3://bucket?endpoint=http://a&endpoint=http://b", "endpoint"},
		{"s3://bucket" + ep + "&region=EU", "region"},
		{"s3://bucket" + ep + "&region=eu/west", "region"},
		{"s3://bucket" + ep + "&path-style=yes", "path-style"},
		{"s3://bucket" + ep + "&pathstyle=true", "query"},
		{"s3://bucket" + ep + "&x=%zz", "query"},
	} {
		c, err := ParseURL(tc.raw)
		if err == nil {
			t.Errorf("%q: taken as %+v", tc.raw, c)
			continue
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), ": "+tc.field+": ") {
			t.Errorf("%q: %v (want ErrConfig naming %s)", tc.raw, err, tc.field)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: the error shows the secret: %v", tc.raw, err)
		}
	}
}

// ParseURL never panics, takes only what a Config's check takes, and
// reads a taken URL's URL() back to the same Config.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"s3://bucket?endpoint=http://127.0.0.1:9000",
		"s3://my.bucket-1/team/sandbox?endpoint=https://s3.example.com&region=eu-west-3&path-style=true",
		"s3://bucket/a/?endpoint=http://[::1]:9000&path-style=false",
		"s3://bucket/a//b?endpoint=http://h",
		"s3://key:secret@bucket?endpoint=http://h",
		"s3://bucket?endpoint=http://h:65536#f",
		"s3:bucket?endpoint=http%3A%2F%2Fh",
		"s3://192.168.1.1/..?region=x&region=y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := ParseURL(raw)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("%q: an error not wrapping ErrConfig: %v", raw, err)
			}
			return
		}
		if field, err := c.check(); err != nil {
			t.Fatalf("%q: taken, but its %s fails the check: %v", raw, field, err)
		}
		if len(c.Prefix)+len("blobs/")+64 > 1024 {
			t.Fatalf("%q: a key would be over 1,024 bytes", raw)
		}
		again, err := ParseURL(c.URL())
		if err != nil || again != c {
			t.Fatalf("%q: URL() = %q reads back as %+v %v, want %+v", raw, c.URL(), again, err, c)
		}
	})
}
