package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/opensubstrate/sandbox/addr"
)

// Job is work queued for any host: its kind (create, exec, suspend,
// resume, close, a fleet item) and its payload, both the queuer's.
type Job struct {
	Kind    string
	Payload []byte
}

func jobMessage(kind, by string, payload []byte) []byte {
	return fields("sandbox.cluster.job/1", kind, by, string(payload))
}

// Enqueue queues j, signed by the member; it returns the job's id.
func (m *Member) Enqueue(ctx context.Context, j Job) (int64, error) {
	if j.Kind == "" {
		return 0, errors.New("cluster: enqueue: a job needs a kind")
	}
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	var id int64
	sig := m.key.Sign(jobMessage(j.Kind, m.Host.ID(), j.Payload))
	err := m.c.retry(ctx, "enqueue", func() error {
		return m.c.pool.QueryRow(ctx, `INSERT INTO cluster_jobs (kind, payload, by_host, sig) VALUES ($1, $2, $3, $4) RETURNING id`,
			j.Kind, j.Payload, m.Host.ID(), sig).Scan(&id)
	})
	if err != nil {
		return 0, fmt.Errorf("cluster: enqueue: %w", err)
	}
	return id, nil
}

// Lease is a claimed job, held until Until (the database's clock) under
// its fencing token.
type Lease struct {
	ID       int64
	Job      Job
	By       string // the member that queued it
	Fence    int64
	Until    time.Time
	Attempts int
}

// Claim takes the oldest job of one of kinds that is queued, or whose
// lease ran out, for d; ErrNoJob when there is none. Its fencing token
// is one above the last. A job whose row does not verify (its queuer's
// signature, under the key of the queuer's host row) is marked failed,
// logged, and never handed out.
func (m *Member) Claim(ctx context.Context, d time.Duration, kinds ...string) (*Lease, error) {
	ls, err := m.ClaimN(ctx, 1, d, kinds...)
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

// ClaimN is Claim for up to n jobs at once, in one transaction (a host
// taking a share of a fleet): at least one, oldest first, or ErrNoJob.
func (m *Member) ClaimN(ctx context.Context, n int, d time.Duration, kinds ...string) ([]*Lease, error) {
	if n < 1 {
		return nil, fmt.Errorf("cluster: claim %d jobs: at least one", n)
	}
	// One statement, one commit: the oldest jobs nobody holds are leased
	// and returned with their queuer's key, then checked here; one whose
	// row does not verify is failed at once, as if never handed out.
	rows, err := m.c.pool.Query(ctx, `WITH picked AS (
	SELECT id FROM cluster_jobs
	WHERE kind = ANY($1) AND (state = 'queued' OR (state = 'leased' AND lease_until < now()))
		AND attempts < 2147483647 AND fence < 9223372036854775807
	ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED
), taken AS (
	UPDATE cluster_jobs j SET state = 'leased', fence = j.fence + 1, holder = $3, attempts = j.attempts + 1,
		lease_until = now() + make_interval(secs => $4)
	FROM picked WHERE j.id = picked.id
	RETURNING j.id, j.kind, j.payload, j.by_host, j.sig, j.fence, j.lease_until, j.attempts
)
SELECT t.id, t.kind, t.payload, t.by_host, t.sig, t.fence, t.lease_until, t.attempts, h.pub, h.id
FROM taken t LEFT JOIN cluster_hosts h ON h.id = t.by_host ORDER BY t.id`, kinds, n, m.Host.ID(), d.Seconds())
	if err != nil {
		return nil, fmt.Errorf("cluster: claim: %w", err)
	}
	var (
		good    []*Lease
		refused = map[*Lease]string{}
	)
	for rows.Next() {
		var (
			l        Lease
			sig, pub []byte
			hostID   *string
		)
		if err := rows.Scan(&l.ID, &l.Job.Kind, &l.Job.Payload, &l.By, &sig, &l.Fence, &l.Until, &l.Attempts, &pub, &hostID); err != nil {
			rows.Close()
			m.giveBack(ctx, good)
			return nil, fmt.Errorf("cluster: claim: %w", err)
		}
		switch {
		case hostID == nil:
			refused[&l] = "its queuer " + l.By + " is no host of the cluster"
		case !jobVerifies(pub, &l, sig):
			refused[&l] = "its queuer's signature does not verify (the row was edited, or written without the key)"
		default:
			good = append(good, &l)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		m.giveBack(ctx, good)
		return nil, fmt.Errorf("cluster: claim: %w", err)
	}
	for l, why := range refused {
		m.c.log().Warn("cluster: a job refused", "job", l.ID, "why", why)
		// Its claim undone as it is failed: it was never handed out.
		// The claim is committed: this goes on if the caller's context
		// ends meanwhile (a host stopping), and a failure leaves the job
		// leased here, never run, until its lease ends.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		_, err := m.c.pool.Exec(uctx, `UPDATE cluster_jobs SET state = 'failed', reason = $3, holder = NULL, lease_until = NULL, ended = now(),
attempts = attempts - 1 WHERE id = $1 AND fence = $2`, l.ID, l.Fence, "refused: "+why)
		cancel()
		if err != nil {
			m.c.log().Warn("cluster: a refused job not marked failed: it stays leased here, never run, until its lease ends", "job", l.ID, "err", err)
		}
	}
	if len(good) == 0 {
		if len(refused) > 0 {
			return m.ClaimN(ctx, n, d, kinds...) // past the refused ones
		}
		return nil, ErrNoJob
	}
	return good, nil
}

// giveBack returns leases a claim committed but could not hand out (its
// result was not read whole) to the queue, whatever the caller's context
// says; one not given back is claimed again when its lease ends.
func (m *Member) giveBack(ctx context.Context, ls []*Lease) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for _, l := range ls {
		if err := m.Release(uctx, l); err != nil {
			m.c.log().Warn("cluster: a claimed job not given back: it is claimed again when its lease ends", "job", l.ID, "err", err)
		}
	}
}

// jobVerifies says l's row is signed by the key pub of its queuer's host.
func jobVerifies(pub []byte, l *Lease, sig []byte) bool {
	return signedBy(l.By, pub, jobMessage(l.Job.Kind, l.By, l.Job.Payload), sig)
}

// EnqueueBatch queues jobs in one transaction (a fleet's items): all or
// none; it returns their ids in order.
func (m *Member) EnqueueBatch(ctx context.Context, jobs []Job) ([]int64, error) {
	tx, err := m.c.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: enqueue: %w", err)
	}
	defer tx.Rollback(ctx)
	b := &pgx.Batch{}
	for _, j := range jobs {
		if j.Kind == "" {
			return nil, errors.New("cluster: enqueue: a job needs a kind")
		}
		if j.Payload == nil {
			j.Payload = []byte{}
		}
		b.Queue(`INSERT INTO cluster_jobs (kind, payload, by_host, sig) VALUES ($1, $2, $3, $4) RETURNING id`,
			j.Kind, j.Payload, m.Host.ID(), m.key.Sign(jobMessage(j.Kind, m.Host.ID(), j.Payload)))
	}
	br := tx.SendBatch(ctx, b)
	ids := make([]int64, len(jobs))
	for i := range jobs {
		if err := br.QueryRow().Scan(&ids[i]); err != nil {
			br.Close()
			return nil, fmt.Errorf("cluster: enqueue: %w", err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("cluster: enqueue: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("cluster: enqueue: %w", err)
	}
	return ids, nil
}

// fenced runs an update of a leased job that holds only under l's
// fencing token and holder, and says ErrStaleFence where it does not.
func (m *Member) fenced(ctx context.Context, what string, l *Lease, set string, args ...any) error {
	return m.fencedIn(ctx, what, l, nil, set, args...)
}

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// fencedIn is fenced, in a transaction held at hold's epoch where hold
// is not nil (Cluster.held).
func (m *Member) fencedIn(ctx context.Context, what string, l *Lease, hold *BlobHold, set string, args ...any) error {
	q := `UPDATE cluster_jobs SET ` + set + ` WHERE id = $1 AND fence = $2 AND holder = $3 AND state = 'leased'`
	var tag pgconn.CommandTag
	exec := func(e execer) (err error) {
		tag, err = e.Exec(ctx, q, append([]any{l.ID, l.Fence, m.Host.ID()}, args...)...)
		return err
	}
	var err error
	if hold != nil {
		err = m.c.held(ctx, what, *hold, func(tx pgx.Tx) error { return exec(tx) })
	} else {
		err = m.c.retry(ctx, what, func() error { return exec(m.c.pool) })
	}
	if err != nil {
		return fmt.Errorf("cluster: %s job %d: %w", what, l.ID, err)
	}
	if tag.RowsAffected() == 0 {
		m.c.log().Warn("cluster: a stale fencing token refused", "job", l.ID, "fence", l.Fence, "host", m.Host.ID(), "op", what)
		return fmt.Errorf("cluster: %s job %d (fence %d): %w", what, l.ID, l.Fence, ErrStaleFence)
	}
	return nil
}

// Renew extends l by d from now (the database's clock).
func (m *Member) Renew(ctx context.Context, l *Lease, d time.Duration) error {
	return m.fenced(ctx, "renew", l, `lease_until = now() + make_interval(secs => $4)`, d.Seconds())
}

// Complete ends l's job with its result, signed by this host with the
// job it ran (resultMessage): whoever reads it (JobState, a collection)
// refuses a result its holder did not sign for that job.
func (m *Member) Complete(ctx context.Context, l *Lease, result []byte) error {
	if result == nil {
		result = []byte{}
	}
	return m.fenced(ctx, "complete", l, `state = 'done', result = $4, result_sig = $5, lease_until = NULL, ended = now()`, result, m.resultSig(l, result))
}

// resultSig is this host's signature of l's result.
func (m *Member) resultSig(l *Lease, result []byte) []byte {
	return m.key.Sign(resultMessage(l.ID, m.Host.ID(), l.Job.Kind, l.By, l.Job.Payload, result))
}

// resultMessage is what the host that completed job id signs of its
// result: the job as it ran it (its kind, its queuer, its payload's
// address) and the result, so that neither another job's result nor
// another payload's passes for this one's.
func resultMessage(id int64, holder, kind, by string, payload, result []byte) []byte {
	pa := addr.Of(payload)
	return fields("sandbox.cluster.result/2", strconv.FormatInt(id, 10), holder, kind, by, string(pa[:]), string(result))
}

// resultChecked says whether job id's result, as its row keeps it (its
// kind, queuer and payload too), is signed by its holder, whose key is
// pub (nil: the cluster has no such host); where not, the error wraps
// ErrEdited.
func resultChecked(id int64, holder, kind, by string, payload, result, pub, sig []byte) error {
	if holder == "" || pub == nil {
		return fmt.Errorf("job %d: its result names no host the cluster has (%q): %w", id, holder, ErrEdited)
	}
	if !signedBy(holder, pub, resultMessage(id, holder, kind, by, payload, result), sig) {
		return fmt.Errorf("job %d: its result is not as host %s signed it for the job: %w", id, holder, ErrEdited)
	}
	return nil
}

// CompleteHeld ends l's job with a result that names objects of the
// blob store, stored under hold (HoldBlobs): ErrCollected where the
// store was collected since. The objects stay until the host that waits
// for the job says it took the result (Cluster.ResultTaken).
func (m *Member) CompleteHeld(ctx context.Context, hold BlobHold, l *Lease, result []byte) error {
	if result == nil {
		result = []byte{}
	}
	return m.fencedIn(ctx, "complete", l, &hold, `state = 'done', result = $4, result_sig = $5, lease_until = NULL, ended = now()`, result, m.resultSig(l, result))
}

// Fail ends l's job as failed, saying why.
func (m *Member) Fail(ctx context.Context, l *Lease, reason string) error {
	return m.fenced(ctx, "fail", l, `state = 'failed', reason = $4, lease_until = NULL, ended = now()`, reason)
}

// State is a job as the queue has it.
type State struct {
	State    string // queued, leased, done, failed
	Fence    int64
	Holder   string
	Attempts int
	Result   []byte
	Reason   string
	// Payload is a done job's payload as its row keeps it (its queuer's
	// signature is checked when it is claimed; its result is signed
	// with it): a queuer waiting for its job compares it with what it
	// queued. Read once the job is done only (it can be large: a fleet
	// item's holds its module).
	Payload []byte
}

// JobState reads job id's state.
func (c *Cluster) JobState(ctx context.Context, id int64) (State, error) {
	var (
		s      State
		holder *string
		reason *string
	)
	var sig, pub []byte
	var kind, by string
	err := c.pool.QueryRow(ctx, `SELECT j.state, j.fence, j.holder, j.attempts, j.result, j.reason, j.result_sig, p.pub, j.kind, j.by_host, CASE WHEN j.state = 'done' THEN j.payload END
FROM cluster_jobs j LEFT JOIN cluster_hosts p ON p.id = j.holder WHERE j.id = $1`, id).Scan(&s.State, &s.Fence, &holder, &s.Attempts, &s.Result, &reason, &sig, &pub, &kind, &by, &s.Payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return State{}, fmt.Errorf("cluster: job %s: no such job", strconv.FormatInt(id, 10))
	}
	if err != nil {
		return State{}, err
	}
	if holder != nil {
		s.Holder = *holder
	}
	if reason != nil {
		s.Reason = *reason
	}
	if s.State == "done" {
		if err := resultChecked(id, s.Holder, kind, by, s.Payload, s.Result, pub, sig); err != nil {
			c.log().Warn("cluster: a job's result refused", "job", id, "err", err)
			return State{}, fmt.Errorf("cluster: %w", err)
		}
	}
	return s, nil
}

// Withdraw ends job id, queued by this member and not yet claimed, as
// failed with reason (its queuer no longer waits for it); a job a host
// holds, or that ended, is left to end as it will: false.
func (m *Member) Withdraw(ctx context.Context, id int64, reason string) (bool, error) {
	tag, err := m.c.pool.Exec(ctx, `UPDATE cluster_jobs SET state = 'failed', reason = $3, ended = now() WHERE id = $1 AND by_host = $2 AND state = 'queued'`, id, m.Host.ID(), "withdrawn: "+reason)
	if err != nil {
		return false, fmt.Errorf("cluster: withdraw job %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Wait polls job id until it ended (done or failed), every poll at most,
// and returns its state; ctx ending first is its error.
func (c *Cluster) Wait(ctx context.Context, id int64, poll time.Duration) (State, error) {
	d := min(poll, 10*time.Millisecond)
	for {
		var s State
		err := c.retry(ctx, "wait", func() (err error) { s, err = c.JobState(ctx, id); return err })
		if err != nil {
			return s, err
		}
		if s.State == "done" || s.State == "failed" {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(d):
		}
		d = min(2*d, poll)
	}
}

// Release gives a leased job back to the queue, unclaimed (its holder
// stops before it ran it: another host takes it at once).
func (m *Member) Release(ctx context.Context, l *Lease) error {
	return m.fenced(ctx, "release", l, `state = 'queued', holder = NULL, lease_until = NULL`)
}
