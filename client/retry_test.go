package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestCallsAreNeverSentTwice: an exec or a create whose handler ran and
// whose connection then broke before any response byte (a handler that
// panicked, a service killed) fails; it is not sent again on another
// connection, where it would run twice.
func TestCallsAreNeverSentTwice(t *testing.T) {
	var execs, creates atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/health":
		case "/v1/sandboxes":
			creates.Add(1)
			panic(http.ErrAbortHandler)
		case "/v1/sandboxes/sb1/exec":
			io.Copy(io.Discard, r.Body)
			execs.Add(1)
			panic(http.ErrAbortHandler)
		}
	}))
	defer ts.Close()
	c, err := Dial(ts.URL, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Health(ctx); err != nil { // a kept connection
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "sb1", ExecSpec{Args: []string{"rm", "-rf", "x"}}, io.Discard, io.Discard); err == nil {
		t.Error("an exec the service dropped succeeded")
	}
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, SandboxSpec{}); err == nil {
		t.Error("a create the service dropped succeeded")
	}
	if execs.Load() != 1 || creates.Load() != 1 {
		t.Errorf("the service ran the exec %d times and the create %d times, want 1 and 1", execs.Load(), creates.Load())
	}
}
