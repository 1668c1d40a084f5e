package s3blobs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/store/storetest"
)

var _ store.Blobs = (*Blobs)(nil)

// The S3 store passes the blob store's conformance suite, each case in a
// bucket of its own.
func TestBlobsConformance(t *testing.T) {
	g := startGateway(t)
	storetest.Blobs(t, func(t *testing.T) store.Blobs { return g.open(t, Config{}) })
}

// And the collector's part of it.
func TestCollectableConformance(t *testing.T) {
	g := startGateway(t)
	storetest.Collectable(t, func(t *testing.T) store.Collectable { return g.open(t, Config{}) })
}

// pattern is n bytes that are not all alike.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i/251) ^ seed
	}
	return b
}

// A blob's object is PREFIX/blobs/<hex>; Open takes the URL and the
// credentials from the environment.
func TestOpenURLAndKeys(t *testing.T) {
	g := startGateway(t)
	bucket := g.bucket()
	t.Setenv("AWS_ACCESS_KEY_ID", testAccess)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testSecret)
	t.Setenv("AWS_SESSION_TOKEN", "")
	b, err := Open("s3://" + bucket + "/team/sandbox?endpoint=" + g.Endpoint + "&path-style=true")
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("a blob under a prefix")
	a := addr.Of(data)
	if err := b.PutBlob(a, data); err != nil {
		t.Fatal(err)
	}
	want := "team/sandbox/blobs/" + a.Hex()
	if keys := g.keys(t, bucket); len(keys) != 1 || keys[0] != want {
		t.Fatalf("keys %q, want [%q]", keys, want)
	}
	// The gateway keeps the object as a file: the same bytes.
	if got, err := os.ReadFile(filepath.Join(g.Root, bucket, want)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the gateway's file: %q %v", got, err)
	}
	if got, err := b.Blob(a); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get: %q %v", got, err)
	}
	if ok, err := b.HasBlobContext(context.Background(), a); !ok || err != nil {
		t.Fatalf("has: %v %v", ok, err)
	}

	for _, env := range []map[string]string{{}, {"AWS_ACCESS_KEY_ID": testAccess}, {"AWS_SECRET_ACCESS_KEY": testSecret}} {
		_, err := open("s3://"+bucket+"?endpoint="+g.Endpoint+"&path-style=true", func(k string) string { return env[k] })
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
			t.Errorf("credentials %v: %v (want ErrConfig naming AWS_ACCESS_KEY_ID)", env, err)
		}
	}
	if _, err := Open("s3://" + bucket + "?endpoint=ftp://x"); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "endpoint") {
		t.Errorf("a bad URL: %v", err)
	}
}

// An absent blob is fs.ErrNotExist and not had; the empty blob is a blob.
func TestAbsentAndEmpty(t *testing.T) {
	g := startGateway(t)
	b := g.open(t, Config{})
	a := addr.Of([]byte("never put"))
	if ok, err := b.HasBlobContext(context.Background(), a); ok || err != nil {
		t.Fatalf("an absent blob: has %v %v", ok, err)
	}
	_, err := b.Blob(a)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), a.String()) {
		t.Fatalf("an absent blob: %v (want fs.ErrNotExist, naming it)", err)
	}
	t.Log(err)
	e := addr.Of(nil)
	if err := b.PutBlob(e, []byte{}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Blob(e); err != nil || len(got) != 0 || !b.HasBlob(e) {
		t.Fatalf("the empty blob: %q %v", got, err)
	}
}

// counting counts the requests a store sends.
type counting struct {
	base http.RoundTripper
	n    atomic.Int64
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}

func transport() http.RoundTripper { return http.DefaultTransport.(*http.Transport).Clone() }

// Bytes that are not the address's, or over the bound, are refused
// before a single request; an object over the bound is not read, even if
// it would hash right.
func TestRefusedBeforeSending(t *testing.T) {
	g := startGateway(t)
	ct := &counting{base: transport()}
	b := g.open(t, Config{MaxSize: 1024, HTTPClient: &http.Client{Transport: ct}})
	sent := ct.n.Load()

	real := pattern(100, 1)
	err := b.PutBlob(addr.Of(real), pattern(100, 2))
	if err == nil || !strings.Contains(err.Error(), addr.Of(real).String()) {
		t.Fatalf("bytes not the address's: %v (want an error naming it)", err)
	}
	big := pattern(1025, 3)
	if err := b.PutBlob(addr.Of(big), big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("1025 bytes, bound 1024: %v (want ErrTooLarge)", err)
	}
	if n := ct.n.Load() - sent; n != 0 {
		t.Fatalf("refused puts sent %d requests, want none", n)
	}
	if keys := g.keys(t, b.bucket); len(keys) != 0 {
		t.Fatalf("refused puts left %q", keys)
	}

	edge := pattern(1024, 4)
	if err := b.PutBlob(addr.Of(edge), edge); err != nil {
		t.Fatalf("1024 bytes, bound 1024: %v", err)
	}
	if got, err := b.Blob(addr.Of(edge)); err != nil || !bytes.Equal(got, edge) {
		t.Fatalf("1024 bytes back: %v", err)
	}
	g.plant(t, b.bucket, b.key(addr.Of(big)), big)
	got, err := b.Blob(addr.Of(big))
	if !errors.Is(err, ErrTooLarge) || got != nil {
		t.Fatalf("a planted object over the bound: %d bytes, %v (want ErrTooLarge)", len(got), err)
	}
	t.Log(err)

	for _, max := range []int64{-1, MaxBlob + 1} {
		c := g.config(b.bucket)
		c.MaxSize = max
		if _, err := New(context.Background(), c); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "MaxSize") {
			t.Errorf("MaxSize %d: %v (want ErrConfig naming MaxSize)", max, err)
		}
	}
}

// An object whose bytes are not its address's is refused, naming the
// address, and never returned; a put of the right bytes mends it.
func TestTampered(t *testing.T) {
	g := startGateway(t)
	b := g.open(t, Config{})
	for _, tc := range []struct {
		name      string
		good, bad []byte
	}{
		{"same length", []byte("the good bytes"), []byte("the evil bytes")},
		{"other length", []byte("the good bytes"), []byte("evil")},
		{"empty", []byte("the good bytes, once more"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := addr.Of(tc.good)
			g.plant(t, b.bucket, b.key(a), tc.bad)
			got, err := b.Blob(a)
			if !errors.Is(err, ErrCorrupt) || got != nil || !strings.Contains(err.Error(), a.String()) {
				t.Fatalf("a tampered object: %q %v (want nil and ErrCorrupt naming %s)", got, err, a)
			}
			t.Log(err)
			if err := b.PutBlob(a, tc.good); err != nil {
				t.Fatal(err)
			}
			if got, err := b.Blob(a); err != nil || !bytes.Equal(got, tc.good) {
				t.Fatalf("after a put of the right bytes: %q %v", got, err)
			}
		})
	}
}

// cutter lets the first PUT's body through up to half, then holds it:
// reached is closed then, and the body fails when the request's context
// ends or cut is closed. Later requests pass.
type cutter struct {
	base    http.RoundTripper
	half    int64
	once    sync.Once
	reached chan struct{}
	cut     chan struct{}
}

func newCutter(half int64) *cutter {
	return &cutter{base: transport(), half: half, reached: make(chan struct{}), cut: make(chan struct{})}
}

func (c *cutter) RoundTrip(r *http.Request) (*http.Response, error) {
	first := false
	if r.Method == http.MethodPut && r.Body != nil {
		c.once.Do(func() { first = true })
	}
	if !first {
		return c.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Body = &cutBody{c: c, rc: r.Body, left: c.half, ctx: r.Context()}
	r.GetBody = nil
	return c.base.RoundTrip(r)
}

type cutBody struct {
	c    *cutter
	rc   io.ReadCloser
	left int64
	ctx  context.Context
	once sync.Once
}

var errCut = errors.New("the test cut the upload")

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		b.once.Do(func() { close(b.c.reached) })
		select {
		case <-b.ctx.Done():
			return 0, b.ctx.Err()
		case <-b.c.cut:
			return 0, errCut
		}
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cutBody) Close() error { return b.rc.Close() }

// waitFor waits for ch within readyBound.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(readyBound):
		t.Fatalf("%s: not within %v", what, readyBound)
	}
}

// A put cut off half way, by its context or by the server's death, leaves
// no object: not had, not got, not listed.
func TestPutInterrupted(t *testing.T) {
	data := pattern(1<<20, 5)
	a := addr.Of(data)
	gone := func(t *testing.T, g *gateway, b *Blobs) {
		t.Helper()
		if ok, err := b.HasBlobContext(context.Background(), a); ok || err != nil {
			t.Fatalf("after the cut: has %v %v", ok, err)
		}
		if got, err := b.Blob(a); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("after the cut: %d bytes, %v (want fs.ErrNotExist)", len(got), err)
		}
		if keys := g.keys(t, b.bucket); len(keys) != 0 {
			t.Fatalf("after the cut: objects %q", keys)
		}
	}

	t.Run("context cancelled", func(t *testing.T) {
		g := startGateway(t)
		cut := newCutter(int64(len(data) / 2))
		b := g.open(t, Config{HTTPClient: &http.Client{Transport: cut}})
		other, err := New(context.Background(), g.config(b.bucket))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- b.PutBlobContext(ctx, a, data) }()
		waitFor(t, cut.reached, "half the body sent")
		if other.HasBlob(a) {
			t.Fatal("half a blob is visible during its upload")
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled put: %v (want context.Canceled)", err)
		}
		gone(t, g, other)
		// The put, again, goes through.
		if err := b.PutBlob(a, data); err != nil {
			t.Fatal(err)
		}
		if got, err := other.Blob(a); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("a put after the cut: %d bytes, %v", len(got), err)
		}
	})

	t.Run("server killed", func(t *testing.T) {
		g := startGateway(t)
		cut := newCutter(int64(len(data) / 2))
		b := g.open(t, Config{HTTPClient: &http.Client{Transport: cut}})
		errc := make(chan error, 1)
		go func() { errc <- b.PutBlob(a, data) }()
		waitFor(t, cut.reached, "half the body sent")
		g.kill()
		close(cut.cut)
		err := <-errc
		if err == nil {
			t.Fatal("a put to a killed server succeeded")
		}
		t.Log(err)
		g.start() // the same root, on a new port
		c := g.config(b.bucket)
		after, err := New(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		gone(t, g, after)
	})
}

// A bucket the server does not have is ErrNoBucket, naming it, at open
// and after (never fs.ErrNotExist: a missing bucket is not a missing
// blob).
func TestNoBucket(t *testing.T) {
	g := startGateway(t)
	c := g.config("no-such-bucket")
	if _, err := New(context.Background(), c); !errors.Is(err, ErrNoBucket) || !strings.Contains(err.Error(), `"no-such-bucket"`) {
		t.Fatalf("open: %v (want ErrNoBucket naming the bucket)", err)
	} else {
		t.Log(err)
	}

	b := g.open(t, Config{})
	if _, err := g.client().DeleteBucket(context.Background(), &s3.DeleteBucketInput{Bucket: aws.String(b.bucket)}); err != nil {
		t.Fatal(err)
	}
	data := []byte("into a bucket that went")
	a := addr.Of(data)
	if err := b.PutBlob(a, data); !errors.Is(err, ErrNoBucket) {
		t.Fatalf("put: %v (want ErrNoBucket)", err)
	}
	if _, err := b.Blob(a); !errors.Is(err, ErrNoBucket) || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("get: %v (want ErrNoBucket, not fs.ErrNotExist)", err)
	}
}

// Credentials the server refuses are ErrDenied, naming the access key ID
// and never the secret.
func TestWrongCredentials(t *testing.T) {
	g := startGateway(t)
	bucket := g.bucket()
	for _, tc := range []struct{ name, id, secret string }{
		{"wrong secret", testAccess, "not-the-secret-0123456789"},
		{"unknown key", "nobody-we-know", testSecret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := g.config(bucket)
			c.AccessKeyID, c.SecretAccessKey = tc.id, tc.secret
			_, err := New(context.Background(), c)
			if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), tc.id) {
				t.Fatalf("%v (want ErrDenied naming %q)", err, tc.id)
			}
			if strings.Contains(err.Error(), tc.secret) {
				t.Fatalf("the error shows the secret: %v", err)
			}
			t.Log(err)
		})
	}
}

// A server that is not there is an error naming the store.
func TestNoServer(t *testing.T) {
	g := startGateway(t)
	c := g.config(g.bucket())
	g.kill()
	ctx, cancel := context.WithTimeout(context.Background(), readyBound)
	defer cancel()
	if _, err := New(ctx, c); err == nil || !strings.Contains(err.Error(), c.URL()) {
		t.Fatalf("%v (want an error naming %s)", err, c.URL())
	}
}
