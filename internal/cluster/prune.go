package cluster

import (
	"context"
	"fmt"
	"time"
)

// The queue's rows of jobs that ended are removed after a while (Prune),
// so that a cluster that has run for months does not keep every job it
// ever ran. Sandboxes' rows are not: a closed sandbox's row is what
// keeps its id from being made again or resumed from an old suspension.

// EndedKeptFor is how long the row of a job that ended is kept: one
// that failed, or that is done with its result taken by the host that
// waited for it (or that named nothing in the blob store).
const EndedKeptFor = 24 * time.Hour

// UntakenKeptFor is how long the row of a job that is done but whose
// result no host took is kept: the host that waited for it ended first,
// or could not keep what the result names. While the row is kept, so are
// the blobs the result names (CollectBlobs); after it, they are
// collected like any other blob nothing names.
const UntakenKeptFor = 7 * 24 * time.Hour

// Pruned says how many job rows Prune removed.
type Pruned struct {
	Ended   int64 // failed, or done with the result taken
	Untaken int64 // done, the result never taken
}

// Prune removes the rows of jobs that ended longer ago than EndedKeptFor
// (UntakenKeptFor for a result no host took), by the database's clock.
// A row that ended before the queue kept when (an earlier version) is
// timed from when it was queued.
func (c *Cluster) Prune(ctx context.Context) (Pruned, error) {
	return c.pruneOlder(ctx, EndedKeptFor, UntakenKeptFor)
}

func (c *Cluster) pruneOlder(ctx context.Context, ended, untaken time.Duration) (Pruned, error) {
	var p Pruned
	err := c.retry(ctx, "prune jobs", func() error {
		tag, err := c.pool.Exec(ctx, `DELETE FROM cluster_jobs WHERE state IN ('done', 'failed')
AND (state = 'failed' OR taken OR result IS NULL OR length(result) = 0)
AND COALESCE(ended, queued) < now() - make_interval(secs => $1)`, ended.Seconds())
		if err != nil {
			return err
		}
		p.Ended = tag.RowsAffected()
		tag, err = c.pool.Exec(ctx, `DELETE FROM cluster_jobs WHERE state = 'done' AND NOT taken
AND COALESCE(ended, queued) < now() - make_interval(secs => $1)`, untaken.Seconds())
		if err != nil {
			return err
		}
		p.Untaken = tag.RowsAffected()
		return nil
	})
	if err != nil {
		return p, fmt.Errorf("cluster: prune jobs: %w", err)
	}
	return p, nil
}
