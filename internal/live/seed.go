package live

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/lifecycle"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/tier"
)

// SeedRequest seeds a sandbox's workspace with a checkout of a git
// repository. Its owner claim is the caller's (trusted context: the run,
// requester, thread and repository it acts for, the ref and the head it
// resolved), never anything the sandbox ran. Without a claim the seed
// is unclaimed: it works, and stays protected (pending) with no owner,
// so its receipt is unknown.
type SeedRequest struct {
	// Source is the repository: an absolute path the sandbox may read
	// (a storage grant) and cannot write (beneath none of its read-write
	// grants), or an https URL the sandbox may reach (a net grant), with
	// no credential in it. The fetch is a run of its own (seedFetch).
	Source string
	Ref    string // a branch name
	// Claim is the owner claim (Claim.Ref must be Ref); nil: unclaimed.
	Claim *lifecycle.Claim
	// Origin is the credential-free https remote bound to the owner at
	// the seed's birth ("": Source, where it is an https URL).
	Origin string
	// Bearer authorizes the fetch from an https source: given to the
	// fetch run on its standard input, never written anywhere, and never
	// in the sandbox.
	Bearer string
	// Incarnation, on a repeated seed, is the one the caller was given;
	// it must be the sandbox's ("": not checked).
	Incarnation string
}

// SeedResult is what a seed bound.
type SeedResult struct {
	Sandbox     string
	Incarnation string
	State       string      // the lifecycle record's: bound, or pending (unclaimed)
	Head        string      // the head the host read from the objects it fetched (the claim's, when bound)
	Cached      bool        // a repeated seed: the original's answer, the checkout untouched
	Runs        []addr.Addr // the fetch run's, then the landing exec's
}

// SeedError is a seed refused or failed; Stage says where.
type SeedError struct {
	ID    string
	Stage string
	Err   error
}

func (e *SeedError) Error() string { return fmt.Sprintf("seed %s: %s: %v", e.ID, e.Stage, e.Err) }
func (e *SeedError) Unwrap() error { return e.Err }

// Invalid: a request that cannot be served as things stand, unless its
// lifecycle record is one this host cannot act on (Unavailable).
func (e *SeedError) Invalid() bool { return !e.Unavailable() }

// Unavailable: the sandbox's lifecycle record is one this host cannot act on.
func (e *SeedError) Unavailable() bool {
	var le *LifecycleError
	return errors.As(e.Err, &le)
}

// checkSeed is everything about req that can be checked without the
// sandbox; it returns the origin to bind.
func checkSeed(req SeedRequest) (string, error) {
	if req.Source == "" {
		return "", errors.New("no source repository")
	}
	if err := lifecycle.CheckRef(req.Ref); err != nil {
		return "", err
	}
	origin := req.Origin
	switch {
	case strings.HasPrefix(req.Source, "https://"):
		o, err := lifecycle.CheckOrigin(req.Source)
		if err != nil {
			return "", fmt.Errorf("source: %w", err)
		}
		if origin == "" {
			origin = o
		}
	case filepath.IsAbs(req.Source):
		if filepath.Clean(req.Source) != req.Source {
			return "", fmt.Errorf("source %q is not a clean path", req.Source)
		}
		if req.Bearer != "" {
			return "", errors.New("a bearer is for an https source")
		}
	default:
		if u, err := url.Parse(req.Source); err == nil && u.Scheme != "" {
			return "", fmt.Errorf("source %q: only https and absolute paths are seeded from", req.Source)
		}
		return "", fmt.Errorf("source %q: an absolute path or an https URL", req.Source)
	}
	if origin != "" {
		o, err := lifecycle.CheckOrigin(origin)
		if err != nil {
			return "", err
		}
		origin = o
	}
	if c := req.Claim; c != nil {
		if err := c.Validate(); err != nil {
			return "", fmt.Errorf("claim: %w", err)
		}
		if c.Ref != req.Ref {
			return "", fmt.Errorf("claim: its ref %q is not the seed's %q", c.Ref, req.Ref)
		}
	}
	return origin, nil
}

// Seed seeds sandbox id's workspace (owner's) from req. A fresh seed is
// marked in the sandbox's lifecycle record (pending, durably) before
// anything of the workspace is touched, and the mark is read again. The
// repository is then fetched by git in a confined run of its own, into a
// directory of the host's that the sandbox cannot reach, with git's
// configuration fixed by the host (seedFetch); the host reads the ref's
// commit from the objects fetched and compares the checkout with that
// commit's tree (verifyFetched); a claimed seed whose head is not the
// claim's stops there, bound and unverified, nothing checked out. Only
// then is the checkout, .git included, landed in the swept workspace by
// an exec of the sandbox (seedLand). Both runs are sealed. A
// repeated seed of a bound sandbox checks the original seed's identity,
// origin and incarnation (never the checkout's HEAD, which moves with
// its work) and answers as the original did, touching nothing.
func (h *Manager) Seed(ctx context.Context, id, owner string, req SeedRequest) (*SeedResult, error) {
	fail := func(stage string, err error) (*SeedResult, error) {
		return nil, &SeedError{ID: id, Stage: stage, Err: err}
	}
	// What can be checked without the sandbox, first.
	origin, err := checkSeed(req)
	if err != nil {
		return fail("refused", err)
	}
	sb, err := h.liveSandbox(id, owner)
	if err != nil {
		return nil, err
	}
	if sb.Tier != tier.S1 || sb.Workspace == "" {
		return fail("refused", errors.New("only an S1 sandbox with a workspace is seeded (git runs in it)"))
	}
	if filepath.IsAbs(req.Source) {
		if _, _, err := sb.grantFor(req.Source, false); err != nil {
			return fail("refused", fmt.Errorf("source %s: %w (give it fs:%s:ro when the sandbox is created)", req.Source, err, req.Source))
		}
	}
	if _, err := sb.seedReadable(req.Source); err != nil {
		return fail("refused", err)
	}
	if req.Incarnation != "" && req.Incarnation != sb.incarnation {
		return fail("refused", fmt.Errorf("incarnation %s is not the sandbox's (%s)", req.Incarnation, sb.incarnation))
	}
	v := h.readLifecycle(id)
	switch v.Class {
	case lifecycle.Unseeded:
	case lifecycle.Bound, lifecycle.BoundUnverified, lifecycle.Legacy, lifecycle.Pending:
		return h.reseed(sb, v, req, origin)
	default:
		return fail("refused", &LifecycleError{ID: id, View: v})
	}
	// The mark: the seed is attempted, durably, before anything else.
	op := lifecycle.Op{Actor: "seed", Ordinal: 1, Kind: "seed", Detached: true}
	seed := lifecycle.Seed{Source: req.Source, Ref: req.Ref, Attempted: h.Now().UTC()}
	if req.Claim != nil {
		seed.Head = req.Claim.Head
	}
	if err := h.updateLifecycle(id, false, func(r *lifecycle.Record) (*lifecycle.Record, error) {
		if r.State != lifecycle.StateUnseeded || r.Incarnation != sb.incarnation {
			return nil, fmt.Errorf("its lifecycle record changed (%s, incarnation %s)", r.State, r.Incarnation)
		}
		n := *r
		n.State, n.Seed, n.Claim, n.Origin = lifecycle.StatePending, &seed, req.Claim, origin
		// The seed is detached work in the record's window: reserved with
		// the mark, settled when its outcome is known. A host that ends in
		// between leaves it owed (lost, at the next incarnation).
		op.Gen = n.Window.Gen
		if err := n.Window.Reserve(op); err != nil {
			return nil, err
		}
		return &n, nil
	}); err != nil {
		return fail("mark", err)
	}
	crash.At(crash.SeedMarked)
	if afterSeedMark != nil {
		afterSeedMark(id)
	}
	// The second read: the mark must be the one just written, or
	// nothing of the workspace is swept.
	again := h.readLifecycle(id)
	if again.Class != lifecycle.Pending || again.Record.Incarnation != sb.incarnation || again.Record.Seed == nil || !again.Record.Seed.Attempted.Equal(seed.Attempted) || again.Record.Seed.Source != seed.Source {
		return fail("refused", fmt.Errorf("its seed mark changed after it was written (%s: %s): nothing was swept", again.Class, again.Reason))
	}
	res := &SeedResult{Sandbox: id, Incarnation: sb.incarnation, State: lifecycle.StatePending}
	// From here every outcome settles the seed's operation, in the same
	// write as what it binds: what the record's state says (pending,
	// bound unverified) keeps protecting.
	settled := false
	settle := func(outcome string, bind, verified bool) error {
		settled = true
		return h.updateLifecycle(id, false, func(r *lifecycle.Record) (*lifecycle.Record, error) {
			n := *r
			if bind {
				n.State, n.Verified = lifecycle.StateBound, verified
			}
			if _, err := n.Window.Settle(op.Gen, op.Actor, op.Ordinal, outcome); err != nil {
				return nil, err
			}
			if err := n.Window.Ack(op.Gen, op.Actor, op.Ordinal); err != nil {
				return nil, err
			}
			return &n, nil
		})
	}
	defer func() {
		if !settled {
			settle("failed", false, false)
		}
	}()
	// The fetch: git, in a confined run of its own (never in the
	// sandbox), into a directory the sandbox cannot reach, with the
	// configuration the host gives it and no other (seedFetch).
	dir, err := state.MkdirNamed(os.TempDir(), "sandbox-seed", h.Store.Namer())
	if err != nil {
		return fail("checkout", err)
	}
	defer os.RemoveAll(dir)
	repo := filepath.Join(dir, "repo")
	fetched, err := h.seedFetch(ctx, sb, req, dir)
	if fetched != nil {
		res.Runs = append(res.Runs, fetched.ID)
	}
	if err != nil {
		return fail("checkout", fmt.Errorf("fetch: %w", err))
	}
	// The head, read by the host from the objects it fetched, and the
	// checkout compared with that commit's tree, file by file.
	head, err := verifyFetched(repo, req.Ref)
	if err != nil {
		return fail("checkout", fmt.Errorf("the objects fetched: %w", err))
	}
	res.Head = head
	if req.Claim != nil && head != req.Claim.Head {
		if err := settle("bound, the head not the claim's", true, false); err != nil {
			return fail("bind", err)
		}
		return fail("verify", fmt.Errorf("the source's %s is at %s (read by the host from the objects it fetched), not the claim's %s: nothing was checked out; the sandbox stays bound, unverified, and is retained", req.Ref, head, req.Claim.Head))
	}
	// The landing: the verified checkout, its .git too, into the
	// workspace, swept first, by the sandbox (a sealed exec) from a
	// stream the host writes.
	landed, err := h.seedLand(ctx, id, owner, repo)
	if landed != nil {
		res.Runs = append(res.Runs, landed.ID)
	}
	if err != nil {
		return fail("checkout", fmt.Errorf("land: %w", err))
	}
	if req.Claim == nil {
		// Unclaimed: it works, and it stays pending, protected, with no owner.
		if err := settle("checked out, unclaimed", false, false); err != nil {
			return fail("mark", err)
		}
		return res, nil
	}
	if err := settle("bound", true, true); err != nil {
		return fail("bind", err)
	}
	res.State = lifecycle.StateBound
	return res, nil
}

// afterSeedMark, in tests, runs between a seed's mark and its second
// read (a writer changing the mark there).
var afterSeedMark func(id string)

// reseed answers a repeated seed of a sandbox seeded before: the same
// owner, seed identity, origin and incarnation get the original answer
// and the checkout is left as it is; anything else is refused before the
// origin or the checkout is touched.
func (h *Manager) reseed(sb *Sandbox, v lifecycle.View, req SeedRequest, origin string) (*SeedResult, error) {
	refuse := func(f string, a ...any) (*SeedResult, error) {
		return nil, &SeedError{ID: sb.ID, Stage: "refused", Err: fmt.Errorf(f, a...)}
	}
	if v.Class == lifecycle.Legacy {
		return refuse("its record is a legacy one, with no origin bound at birth: a retry cannot upgrade it")
	}
	r := v.Record
	switch {
	case v.Class == lifecycle.Pending && r.Claim == nil:
		return refuse("it was seeded unclaimed (or its seed's outcome is unknown): it is kept as it is, and not seeded again")
	case r.Claim == nil || req.Claim == nil || *r.Claim != *req.Claim:
		return refuse("it is bound to another owner claim")
	case r.Origin == "" && origin != "":
		return refuse("its record has no origin bound at birth")
	case r.Origin != origin:
		return refuse("its origin is %q, not %q", r.Origin, origin)
	case r.Seed == nil || r.Seed.Source != req.Source || r.Seed.Ref != req.Ref || r.Seed.Head != req.Claim.Head:
		return refuse("it was seeded from another source, ref or head")
	case r.Incarnation != sb.incarnation:
		return refuse("its record is of incarnation %s, the sandbox's is %s", r.Incarnation, sb.incarnation)
	case v.Class != lifecycle.Bound:
		return refuse("its seed is %s: it is kept as it is until it is verified", v.Class)
	}
	return &SeedResult{Sandbox: sb.ID, Incarnation: sb.incarnation, State: lifecycle.StateBound, Head: r.Seed.Head, Cached: true}, nil
}
