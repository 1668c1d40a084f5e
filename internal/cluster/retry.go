package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A cluster outlives a restart of its database: what a host was doing
// when PostgreSQL went away (a fleet's host waiting on its items, a
// host completing one) is tried again until the database answers, for
// at most RetryFor; what PostgreSQL refused on its merits is not.

// RetryFor bounds how long a call is tried again while the database
// does not answer.
const RetryFor = 2 * time.Minute

// Transient says err is the database being away (a connection refused
// or cut, the server shutting down or starting), or a transaction it
// ended to break a deadlock, not a refusal.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// 08: connection exceptions; 57P: operator intervention
		// (admin shutdown, crash shutdown, cannot connect now); 40P01,
		// 40001: a transaction PostgreSQL ended, rolled back, to break
		// a deadlock (with a host making the schema) or a
		// serialization conflict.
		return len(pe.Code) == 5 && (pe.Code[:2] == "08" || pe.Code[:3] == "57P" || pe.Code == "40P01" || pe.Code == "40001")
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// retried is f's answer, f called as retry calls it: for reads, which
// are safe to ask again.
func retried[T any](ctx context.Context, c *Cluster, what string, f func() (T, error)) (T, error) {
	var out T
	err := c.retry(ctx, what, func() (err error) {
		out, err = f()
		return err
	})
	return out, err
}

// retry calls f until it succeeds, fails for a reason that is not
// Transient, ctx ends, or RetryFor passes; the last error is returned.
func (c *Cluster) retry(ctx context.Context, what string, f func() error) error {
	deadline := time.Now().Add(RetryFor)
	wait := 50 * time.Millisecond
	for logged := false; ; {
		err := f()
		if !Transient(err) || time.Now().After(deadline) {
			return err
		}
		if !logged {
			c.log().Warn("cluster: the database does not answer: trying again", "op", what, "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
