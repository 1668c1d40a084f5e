package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/tier"
)

// A suspended sandbox travels (docs/cluster.md): the host that suspends
// it keeps its bundle in the cluster's blob store and says so here; any
// host that resumes it takes it here first, so that one host at a time
// holds it live. Each change raises the row's fencing token.

// ErrHeldElsewhere: the sandbox is live on another host, or was taken by
// one since this host last held it.
var ErrHeldElsewhere = errors.New("the sandbox is held by another host")

// ErrNotShared: the cluster keeps nothing of this sandbox (it was never
// suspended on a host of the cluster).
var ErrNotShared = errors.New("the cluster keeps nothing of this sandbox")

// Kept is a sandbox as the cluster keeps it.
type Kept struct {
	Host   string    // the host that holds it, or last suspended it
	State  string    // live, suspended
	Head   addr.Addr // its record's head when suspended
	Bundle addr.Addr // its bundle in the blob store
	Fence  int64
	// Dead: it was taken live from a host that stopped heartbeating.
	Dead bool
	// Local: its last suspension is this host's own (it signed it, or
	// it is a row from before signed suspensions that this host wrote):
	// it is resumed from what this host keeps, not from the bundle.
	Local bool
}

// SandboxSuspended says this host suspended sandbox id, owner's, its
// record at head, its bundle stored under bundle and the list of the
// objects it names (EncodeObjects) under objects (zero: none; a
// collection then reads the bundle), with the objects it names stored
// under hold (HoldBlobs): ErrCollected where the blob store was
// collected since. The row says all of that under this host's signature
// (suspension); owner is the sandbox's as this host, which holds it,
// knows it. Refused (ErrHeldElsewhere) when another host took the
// sandbox since this one held it: the suspension this host made is then
// of a copy it no longer holds.
func (m *Member) SandboxSuspended(ctx context.Context, hold BlobHold, id, owner string, head, bundle, objects addr.Addr) error {
	list := []byte{}
	if !objects.IsZero() {
		list = objects[:]
	}
	s := suspension{id: id, by: m.Host.ID(), owner: ownerText(owner), head: head, bundle: bundle, objects: objects}
	sig := m.key.Sign(s.message())
	var tag pgconn.CommandTag
	err := m.c.held(ctx, "sandbox suspended", hold, func(tx pgx.Tx) (err error) {
		tag, err = tx.Exec(ctx, `INSERT INTO cluster_sandboxes (id, host, state, head, bundle, objects, fence, owner, by_host, sig) VALUES ($1, $2, 'suspended', $3, $4, $6, 1, $5, $2, $7)
ON CONFLICT (id) DO UPDATE SET state = 'suspended', head = $3, bundle = $4, objects = $6, owner = $5, by_host = $2, sig = $7, fence = cluster_sandboxes.fence + 1, updated = now()
WHERE cluster_sandboxes.host = $2`, id, m.Host.ID(), head[:], bundle[:], s.owner, list, sig)
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster: sandbox %s suspended: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		m.c.log().Warn("cluster: a suspension of a sandbox another host holds", "sandbox", id, "host", m.Host.ID())
		return fmt.Errorf("cluster: sandbox %s: %w", id, ErrHeldElsewhere)
	}
	return nil
}

// DefaultDeadAfter is how long a host may go without a heartbeat (by
// the database's clock) before the sandboxes it holds live may be taken
// by another host, from their last suspension.
const DefaultDeadAfter = 30 * time.Second

// TakeSandbox makes this host the holder of sandbox id, live, and
// returns what the cluster keeps of it (its bundle to fetch where
// another host suspended it last). A sandbox that is suspended is taken;
// so is one live on a host that has not heartbeaten for DeadAfter (it
// comes back from its last suspension: what it did since is lost, and
// Kept.Dead says so; one never suspended is lost with its host,
// ErrLost). One live on a host that is alive, this one included, is
// refused (ErrHeldElsewhere, naming the host); one the cluster keeps
// nothing of is ErrNotShared; a closed one ErrClosed. owner is who asks:
// "" (the operator of a host) takes any; a principal only its own
// (ErrNotYours). A row that is not as the host that suspended the
// sandbox signed it (suspension) is refused and logged, and the
// sandbox is not taken (ErrEdited); one that no host signed (written by
// a version before signed suspensions) is taken by the host that
// suspended it alone, which keeps that suspension itself.
//
// The row is locked first, then its host's heartbeat read: two hosts
// that take one sandbox at once are one after the other, and the second
// sees the first alive.
func (m *Member) TakeSandbox(ctx context.Context, id, owner string) (Kept, error) {
	var k Kept
	dead := m.c.DeadAfter
	if dead <= 0 {
		dead = DefaultDeadAfter
	}
	var markedLost bool
	err := pgx.BeginFunc(ctx, m.c.pool, func(tx pgx.Tx) error {
		var (
			state, owned, by           string
			head, bundle, objects, sig []byte
		)
		err := tx.QueryRow(ctx, `SELECT host, state, head, bundle, objects, owner, by_host, sig, fence FROM cluster_sandboxes WHERE id = $1 FOR UPDATE`, id).
			Scan(&k.Host, &state, &head, &bundle, &objects, &owned, &by, &sig, &k.Fence)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("cluster: sandbox %s: %w", id, ErrNotShared)
		}
		if err != nil {
			return fmt.Errorf("cluster: sandbox %s: %w", id, err)
		}
		suspended := len(bundle) > 0 || by != "" || len(sig) > 0 // a suspension is kept (or its row says so)
		switch {
		case state != "suspended" && state != "live":
			// Closed or lost: not taken, whatever its row says.
		case by == "" && len(sig) == 0 && state == "suspended" && k.Host == m.Host.ID():
			// Its own suspension, from before signed suspensions: this
			// host resumes it from what it keeps (the row's addresses
			// are not used), and signs the next.
			k.Local = true
		case suspended || state == "suspended":
			// Checked before anything else is read of it, so that an
			// edit is refused and logged, whoever asks (one that says
			// suspended and names no suspension too).
			var pub []byte
			if by != "" {
				if err := tx.QueryRow(ctx, `SELECT pub FROM cluster_hosts WHERE id = $1`, by).Scan(&pub); err != nil && !errors.Is(err, pgx.ErrNoRows) {
					return fmt.Errorf("cluster: sandbox %s: the key of host %s: %w", id, by, err)
				}
			}
			s, err := signedRow(id, owned, by, head, bundle, objects, pub, sig)
			if err != nil {
				m.c.log().Warn("cluster: a sandbox's row refused: it is not taken", "sandbox", id, "err", err)
				return fmt.Errorf("cluster: %w", err)
			}
			k.Head, k.Bundle, k.Local = s.head, s.bundle, s.by == m.Host.ID()
		}
		if owner != "" && owned != ownerText(owner) {
			// Another principal's, as if it were not there.
			return fmt.Errorf("cluster: sandbox %s: %w", id, ErrNotYours)
		}
		gone := false
		if state == "live" && k.Host != m.Host.ID() {
			if err := tx.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM cluster_hosts WHERE id = $1 AND seen >= now() - make_interval(secs => $2))`, k.Host, dead.Seconds()).Scan(&gone); err != nil {
				return fmt.Errorf("cluster: sandbox %s: its host's heartbeat: %w", id, err)
			}
		}
		switch {
		case state == "closed":
			return fmt.Errorf("cluster: sandbox %s, on host %s: %w", id, k.Host, ErrClosed)
		case state == "lost":
			return fmt.Errorf("cluster: sandbox %s, of host %s: %w", id, k.Host, ErrLost)
		case state != "live" && state != "suspended":
			err := fmt.Errorf("cluster: sandbox %s: its row's state is %q: %w", id, state, ErrEdited)
			m.c.log().Warn("cluster: a sandbox's row refused: it is not taken", "sandbox", id, "err", err)
			return err
		case state == "live" && !gone:
			return fmt.Errorf("cluster: sandbox %s is live on host %s: %w", id, k.Host, ErrHeldElsewhere)
		case state == "live" && !suspended:
			if _, err := tx.Exec(ctx, `UPDATE cluster_sandboxes SET state = 'lost', fence = fence + 1, updated = now() WHERE id = $1`, id); err != nil {
				return fmt.Errorf("cluster: sandbox %s: %w", id, err)
			}
			markedLost = true
			return nil
		}
		if k.Local && k.Bundle.IsZero() {
			m.c.log().Info("cluster: a sandbox suspended here before suspensions were signed is taken here", "sandbox", id)
		}
		k.Fence++
		k.State, k.Dead = "live", state == "live"
		_, err = tx.Exec(ctx, `UPDATE cluster_sandboxes SET state = 'live', host = $2, fence = $3, updated = now() WHERE id = $1`, id, m.Host.ID(), k.Fence)
		return err
	})
	if err != nil {
		return Kept{}, err
	}
	if markedLost {
		m.c.log().Warn("cluster: a sandbox lost with its host: never suspended there", "sandbox", id, "host", k.Host)
		return Kept{}, fmt.Errorf("cluster: sandbox %s, of host %s: %w", id, k.Host, ErrLost)
	}
	if k.Dead {
		m.c.log().Warn("cluster: a sandbox taken from a host that stopped heartbeating: it comes back from its last suspension", "sandbox", id, "from", k.Host, "head", k.Head)
	}
	return k, nil
}

// Lost are the sandboxes among ids that this host no longer holds: the
// cluster says another host holds them (taken while this one was thought
// dead). A host that comes back ends them without recording anything:
// they continue elsewhere.
func (m *Member) Lost(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := m.c.pool.Query(ctx, `SELECT id FROM cluster_sandboxes WHERE id = ANY($1) AND host <> $2`, ids, m.Host.ID())
	if err != nil {
		return nil, fmt.Errorf("cluster: the sandboxes held here: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// ReleaseSandbox gives back a sandbox this host took under fence but
// could not resume: suspended again, as it was.
func (m *Member) ReleaseSandbox(ctx context.Context, id string, fence int64) error {
	tag, err := m.c.pool.Exec(ctx, `UPDATE cluster_sandboxes SET state = 'suspended', fence = fence + 1, updated = now()
WHERE id = $1 AND host = $2 AND fence = $3 AND state = 'live'`, id, m.Host.ID(), fence)
	if err != nil {
		return fmt.Errorf("cluster: sandbox %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("cluster: sandbox %s (fence %d): %w", id, fence, ErrStaleFence)
	}
	return nil
}

// ErrLost: the sandbox was live on a host that stopped heartbeating and
// was never suspended there: nothing of it is kept, it is lost with its
// host (never recreated empty).
var ErrLost = errors.New("the sandbox is lost: its host stopped heartbeating and it was never suspended")

// ErrNotYours: the sandbox is another principal's.
var ErrNotYours = errors.New("no sandbox of yours by that id")

// ErrClosed: the sandbox's record was closed; it is never resumed.
var ErrClosed = errors.New("the sandbox was closed")

// SandboxMade says sandbox id, owner's, was made here and is held here, live:
// other hosts forward requests for it here. An id the cluster already
// keeps is refused.
func (m *Member) SandboxMade(ctx context.Context, id string, t tier.Tier, owner string) error {
	// Said again of one it holds live (a host that joins tells of what
	// it made before): the same.
	tag, err := m.c.pool.Exec(ctx, `INSERT INTO cluster_sandboxes (id, host, state, head, bundle, fence, tier, owner) VALUES ($1, $2, 'live', '', '', 1, $3, $4)
ON CONFLICT (id) DO UPDATE SET updated = now() WHERE cluster_sandboxes.host = $2 AND cluster_sandboxes.state = 'live' AND cluster_sandboxes.owner = $4`, id, m.Host.ID(), t.String(), ownerText(owner))
	if err != nil {
		return fmt.Errorf("cluster: sandbox %s made: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("cluster: sandbox %s made here, but the cluster keeps one of that id: %w", id, ErrHeldElsewhere)
	}
	return nil
}

// SandboxClaimed says sandbox id, made here for a warm pool and held
// here live, was claimed by owner: it is owner's in the cluster too (its
// list, who may take it). Where the cluster keeps a suspension of it,
// this host signs that suspension again, with its new owner, once the
// old signature holds (a row edited by hand is refused, and logged).
func (m *Member) SandboxClaimed(ctx context.Context, id, owner string) error {
	err := pgx.BeginFunc(ctx, m.c.pool, func(tx pgx.Tx) error {
		var was, by string
		var head, bundle, objects, sig, pub []byte
		err := tx.QueryRow(ctx, `SELECT s.owner, s.head, s.bundle, s.objects, s.by_host, s.sig, p.pub
FROM cluster_sandboxes s LEFT JOIN cluster_hosts p ON p.id = s.by_host
WHERE s.id = $1 AND s.host = $2 AND s.state = 'live' FOR UPDATE OF s`, id, m.Host.ID()).Scan(&was, &head, &bundle, &objects, &by, &sig, &pub)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("the cluster does not keep it live here: %w", ErrHeldElsewhere)
		}
		if err != nil {
			return err
		}
		if len(bundle) == 0 && by == "" && len(sig) == 0 { // never suspended
			_, err = tx.Exec(ctx, `UPDATE cluster_sandboxes SET owner = $2, fence = fence + 1, updated = now() WHERE id = $1`, id, ownerText(owner))
			return err
		}
		s, err := signedRow(id, was, by, head, bundle, objects, pub, sig)
		if err != nil {
			m.c.log().Warn("cluster: a sandbox's row refused: its claim is not said", "sandbox", id, "err", err)
			return err
		}
		s.by, s.owner = m.Host.ID(), ownerText(owner)
		_, err = tx.Exec(ctx, `UPDATE cluster_sandboxes SET owner = $2, by_host = $3, sig = $4, fence = fence + 1, updated = now() WHERE id = $1`,
			id, s.owner, s.by, m.key.Sign(s.message()))
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster: sandbox %s claimed: %w", id, err)
	}
	return nil
}

// SandboxClosed says sandbox id, held here, was closed (or removed): no
// host may resume it from a suspension it published before.
func (m *Member) SandboxClosed(ctx context.Context, id string) error {
	_, err := m.c.pool.Exec(ctx, `UPDATE cluster_sandboxes SET state = 'closed', fence = fence + 1, updated = now() WHERE id = $1 AND host = $2`, id, m.Host.ID())
	if err != nil {
		return fmt.Errorf("cluster: sandbox %s closed: %w", id, err)
	}
	return nil
}

// Holding is who holds a sandbox, as the cluster says.
type Holding struct {
	Host  Seen   // its row verified
	State string // live, suspended, closed, lost
	// Tier is the sandbox's tier, where the host that made it said
	// (zero: it did not).
	Tier tier.Tier
	// Kept says the cluster keeps a suspension of it (a bundle).
	Kept bool
}

// Holder is the host that holds sandbox id (ErrNotShared: the cluster
// keeps nothing of it); a holder whose row does not verify is refused.
func (c *Cluster) Holder(ctx context.Context, id string) (Holding, error) {
	var h Holding
	var host, t string
	err := c.retry(ctx, "holder", func() error {
		return c.pool.QueryRow(ctx, `SELECT host, state, tier, length(bundle) = 32 FROM cluster_sandboxes WHERE id = $1`, id).Scan(&host, &h.State, &t, &h.Kept)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return h, fmt.Errorf("cluster: sandbox %s: %w", id, ErrNotShared)
	}
	if err != nil {
		return h, fmt.Errorf("cluster: sandbox %s: %w", id, err)
	}
	if t != "" {
		if h.Tier, err = tier.Parse(t); err != nil {
			return h, fmt.Errorf("cluster: sandbox %s: its tier %q: %w", id, t, err)
		}
	}
	h.Host, err = c.Host(ctx, host)
	return h, err
}

// Host is host id as the cluster knows it, its row verified.
func (c *Cluster) Host(ctx context.Context, id string) (Seen, error) {
	var (
		s        Seen
		tiers, a string
		pub, sig []byte
		age      float64
	)
	err := c.retry(ctx, "host", func() error {
		return c.pool.QueryRow(ctx, `SELECT pub, tiers, capacity, idle_mw, addr, sig, joined, seen, extract(epoch FROM now() - seen) FROM cluster_hosts WHERE id = $1`, id).
			Scan(&pub, &tiers, &s.Capacity, &s.IdleMW, &a, &sig, &s.Joined, &s.Seen, &age)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("cluster: host %s: no such host", id)
	}
	if err != nil {
		return s, fmt.Errorf("cluster: host %s: %w", id, err)
	}
	s.Addr, s.Age = a, time.Duration(age*float64(time.Second))
	if err := s.Host.fill(id, pub, tiers, sig); err != nil {
		c.log().Warn("cluster: a host row refused", "id", id, "err", err)
		return s, fmt.Errorf("cluster: host %s: %w", id, err)
	}
	return s, nil
}

// Listed is a sandbox as the cluster lists it.
type Listed struct {
	ID      string
	Host    string // the host that holds it, or last did
	State   string // live, suspended, lost
	Tier    tier.Tier
	Created time.Time // when the cluster first heard of it
	Updated time.Time
}

// Sandboxes are owner's sandboxes the cluster keeps ("": every
// owner's): live on a host, suspended, or lost with their host; closed
// ones are not listed. Oldest first.
func (c *Cluster) Sandboxes(ctx context.Context, owner string) ([]Listed, error) {
	return retried(ctx, c, "sandboxes", func() ([]Listed, error) { return c.sandboxes(ctx, owner) })
}

func (c *Cluster) sandboxes(ctx context.Context, owner string) ([]Listed, error) {
	rows, err := c.pool.Query(ctx, `SELECT id, host, state, tier, created, updated FROM cluster_sandboxes
WHERE state IN ('live', 'suspended', 'lost') AND ($1 = '' OR owner = $1) ORDER BY created, id`, ownerText(owner))
	if err != nil {
		return nil, fmt.Errorf("cluster: the sandboxes: %w", err)
	}
	defer rows.Close()
	var out []Listed
	for rows.Next() {
		var l Listed
		var t string
		if err := rows.Scan(&l.ID, &l.Host, &l.State, &t, &l.Created, &l.Updated); err != nil {
			return nil, fmt.Errorf("cluster: the sandboxes: %w", err)
		}
		if t != "" {
			if l.Tier, err = tier.Parse(t); err != nil {
				return nil, fmt.Errorf("cluster: sandbox %s: its tier %q: %w", l.ID, t, err)
			}
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// ownerText is owner as the cluster's rows keep it: PostgreSQL's text
// holds no NUL byte, which a warm pool's owner ("\x00pool:NAME") has, so
// a NUL is written \0 and a backslash \\ (one to one: two owners are
// never kept alike).
func ownerText(owner string) string {
	if !strings.ContainsAny(owner, "\x00\\") {
		return owner
	}
	return strings.NewReplacer("\\", "\\\\", "\x00", "\\0").Replace(owner)
}
