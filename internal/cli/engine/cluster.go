package engine

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/budget"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/cluster"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/server"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/store/pgstore"
	"github.com/opensubstrate/sandbox/internal/store/s3blobs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/tier"
)

// heartbeatEvery is how often a host that joined a cluster says it is
// alive.
const heartbeatEvery = 5 * time.Second

// joinCluster registers the host in the cluster o.cluster names (its
// key, the tiers its probes earned, its capacity, its rated idle power,
// where it answers) and heartbeats until ctx ends; it takes fleet items
// (o.itemSlots) and collects the blob store (o.gcEvery). The closer it
// returns closes the cluster and its blob store: after the manager has
// suspended (and published) its sandboxes at shutdown.
func joinCluster(ctx context.Context, o *serveOptions, ho *live.Manager, addr string, log *slog.Logger) (func(), error) {
	dsn, blobsURL, caFile, maxLive, itemSlots := o.cluster, o.blobs, o.clusterCA, o.maxLive, o.itemSlots
	var tlsc *tls.Config
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, errs.Usage{Err: fmt.Errorf("--cluster-ca: %w", err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errs.Usage{Err: fmt.Errorf("--cluster-ca %s: no PEM certificate in it", caFile)}
		}
		tlsc = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c, err := cluster.Open(ctx, dsn)
	if err != nil {
		return nil, errs.Usage{Err: fmt.Errorf("--cluster: %w", err)}
	}
	c.Log = log
	if v := os.Getenv("SANDBOX_CLUSTER_DEAD_AFTER"); v != "" {
		if c.DeadAfter, err = time.ParseDuration(v); err != nil || c.DeadAfter <= 0 {
			c.Close()
			return nil, errs.Usage{Err: fmt.Errorf("SANDBOX_CLUSTER_DEAD_AFTER=%q: want a duration above zero, like 30s", v)}
		}
	}
	if maxLive <= 0 {
		maxLive = live.MaxSandboxes
	}
	h := cluster.Host{Key: ho.Key.Public(), Tiers: ho.Availability(ctx).Available(), Capacity: maxLive,
		IdleMW: int64(ho.MeterOf().TDP[device.CPU].MilliWatts), Addr: addr}
	m, err := c.Join(ctx, ho.Key, h)
	if err != nil {
		c.Close()
		return nil, err
	}
	log.Info("joined the cluster", "host", h.ID(), "tiers", h.Tiers, "capacity", h.Capacity)
	blobs, closeBlobs, err := openClusterBlobs(ctx, dsn, blobsURL)
	if err != nil {
		c.Close()
		return nil, err
	}
	shared := &clusterShared{c: c, m: m, blobs: blobs, key: ho.Key, tls: tlsc, poke: make(chan struct{}, 1), tempName: ho.Store.Namer()}
	ho.Join(shared, shared)
	// What it made before it joined (its warm pools' first sandboxes).
	ho.ShareLive()
	reportPools := func() {
		ready := map[string]int{}
		for _, p := range ho.Pools() {
			ready[p.Name] = p.Ready
		}
		if err := m.ReportPools(ctx, ready); err != nil && ctx.Err() == nil {
			log.Warn("cluster: this host's warm pools not reported: claims through other hosts are not sent here", "err", err)
		}
	}
	reportPools()
	// Said again whenever a pool's ready count changes (a claim, a
	// sandbox made or evicted), one report for however many changes
	// came meanwhile, besides each heartbeat.
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-shared.poke:
				reportPools()
			}
		}
	}()
	// S7 runs append to the cluster's one audit trail, and JCP runs
	// reserve in its one budget ledger.
	ho.Trail = m.Trail()
	ho.SharedLedger = m.Chain(cluster.LedgerName, budget.Genesis())
	wctx, stopWork := context.WithCancel(ctx)
	working := make(chan struct{})
	go func() {
		defer close(working)
		shared.workItems(wctx, ho, itemSlots, log)
	}()
	if o.gcEvery > 0 {
		go shared.collectEvery(ctx, o.gcEvery, log)
	}
	every := heartbeatEvery
	if d := c.DeadAfter; d > 0 && d/3 < every {
		every = d / 3 // three heartbeats in each DeadAfter
	}
	go tick(ctx, every, func() {
		if err := m.Heartbeat(ctx); err != nil && ctx.Err() == nil {
			log.Warn("cluster heartbeat", "err", err)
			return
		}
		reportPools()
		// Back from a stall: what the cluster gave to others meanwhile
		// is not this host's to act on.
		lost, err := m.Lost(ctx, ho.LiveIDs())
		if err != nil && ctx.Err() == nil {
			log.Warn("cluster: the sandboxes held here", "err", err)
		}
		for _, id := range lost {
			ho.Forfeit(id, "the cluster gave it to another host while this one did not heartbeat")
		}
	})
	return func() {
		stopWork() // what it holds and has not run goes back to the queue
		<-working
		closeBlobs()
		c.Close()
	}, nil
}

func clusterCmd(g *cli.Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "cluster",
		Short: "See a cluster's hosts and work queue (hosts join with 'serve --cluster')",
		Long: `A cluster is hosts that share a PostgreSQL database (the system of
record and work queue): 'sandbox serve --cluster DSN' registers a host
(a row signed with its key: its tiers, capacity, rated idle power and
address) and heartbeats every 5 s. See docs/cluster.md for what works
across hosts today and what does not yet.`,
		Args: cli.UsageArgs(cobra.NoArgs),
	}
	c.AddCommand(clusterHostsCmd(g), clusterTrailCmd(g), clusterGCCmd(g))
	return c
}

func clusterGCCmd(g *cli.Globals) *cobra.Command {
	var dsn, blobsURL string
	var dryRun, asJSON bool
	c := &cobra.Command{
		Use:   "gc --cluster DSN [--blobs URL] [--dry-run] [--json]",
		Short: "Remove from the cluster's blob store every object no kept sandbox or untaken fleet result names",
		Long: `Collect the cluster's blob store (docs/cluster.md, "Collecting the blob
store"): remove every object that no sandbox the cluster keeps (live,
suspended or lost: all but closed ones; every object its record names,
its bundle among them) and no fleet item's result not yet taken by its
fleet's host names. Hosts wait to store objects while it runs, and a
suspension stored while it began is stored again, so nothing a sandbox
needs is removed; a collector that stalls past its lease removes
nothing more. A kept sandbox whose bundle cannot be read (tampered,
or an object it names missing) stops the collection before anything
is removed, naming the sandbox. Before it, the queue's rows of jobs
that ended more than a day ago are removed (a week for a fleet result
no host took: its objects go with it). --blobs names the store as
'serve --blobs' does (default the cluster's PostgreSQL). --dry-run
removes nothing and says what a collection would remove now.`,
		Args: cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := notAStateDir(blobsURL); err != nil {
				return err
			}
			cl, err := openCluster(cmd, dsn)
			if err != nil {
				return err
			}
			defer cl.Close()
			b, closeBlobs, err := openClusterBlobs(cmd.Context(), clusterDSN(dsn), blobsURL)
			if err != nil {
				return err
			}
			defer closeBlobs()
			cb, ok := b.(store.Collectable)
			if !ok {
				return fmt.Errorf("the blob store %s cannot be listed: it is not collected", blobsURL)
			}
			hostname, _ := os.Hostname()
			by := fmt.Sprintf("sandbox cluster gc on %s (pid %d)", hostname, os.Getpid())
			var res struct {
				cluster.Collection
				Jobs *cluster.Pruned `json:"jobs_pruned,omitempty"` // nil in a dry run
			}
			if !dryRun {
				p, err := cl.Prune(cmd.Context())
				if err != nil {
					return err
				}
				res.Jobs = &p
			}
			res.Collection, err = cl.CollectBlobs(cmd.Context(), cb, collectNamer{blobs: b}, by, dryRun)
			if err != nil {
				return err
			}
			if asJSON {
				return cli.PrintJSON(cmd.OutOrStdout(), res)
			}
			col := res.Collection
			verb := "removed"
			if dryRun {
				verb = "would remove"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d objects stored, %d named by %d kept sandboxes and %d fleet results not yet taken: %s %d\n",
				col.Stored, col.Named, col.Sandboxes, col.Results, verb, col.Removed)
			if res.Jobs != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "%d rows of ended jobs removed (%d of them fleet results no host took)\n",
					res.Jobs.Ended+res.Jobs.Untaken, res.Jobs.Untaken)
			}
			return nil
		},
	}
	c.Flags().StringVar(&dsn, "cluster", "", "the cluster's PostgreSQL (postgres://… or key=value; default $SANDBOX_CLUSTER)")
	c.Flags().StringVar(&blobsURL, "blobs", "", "the cluster's blob store, as 'serve --blobs' names it: s3://BUCKET[/PREFIX]?endpoint=…, file:///DIR; default the cluster's PostgreSQL")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "remove nothing: say what a collection would remove")
	c.Flags().BoolVar(&asJSON, "json", false, "print what was found and done as JSON")
	return c
}

// collectEvery collects the cluster's blob store every d until ctx
// ends (serve --cluster-gc-every), as 'sandbox cluster gc' does; a
// collection another host runs is left to it.
func (s *clusterShared) collectEvery(ctx context.Context, d time.Duration, log *slog.Logger) {
	cb, ok := s.blobs.(store.Collectable)
	if !ok {
		log.Warn("cluster: the blob store cannot be listed: it is not collected")
		return
	}
	by := fmt.Sprintf("host %s (pid %d)", s.m.Host.ID(), os.Getpid())
	tick(ctx, d, func() {
		if p, err := s.c.Prune(ctx); err != nil && ctx.Err() == nil {
			log.Warn("cluster: the queue's ended jobs not pruned", "err", err)
		} else if p.Ended+p.Untaken > 0 {
			log.Info("cluster: the queue's ended jobs pruned", "ended", p.Ended, "untaken", p.Untaken)
		}
		// (What it found and removed, the cluster logs.)
		_, err := s.c.CollectBlobs(ctx, cb, collectNamer{blobs: s.blobs, tempName: s.tempName}, by, false)
		switch {
		case errors.Is(err, cluster.ErrCollecting):
			log.Info("cluster: a collection of the blob store runs elsewhere", "err", err)
		case err != nil && ctx.Err() == nil:
			log.Warn("cluster: the blob store not collected", "err", err)
		}
	})
}

// tick calls f every d until ctx ends.
func tick(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}

// notAStateDir refuses a file:// blob store that is a host's state
// directory (its host key, runs or index there): its blobs are that
// host's records' too, which a cluster's collection does not see.
func notAStateDir(raw string) error {
	if !strings.HasPrefix(raw, "file://") {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errs.Usage{Err: fmt.Errorf("--blobs %q: %w", raw, err)}
	}
	for _, n := range []string{"host.key", "runs", "index.db"} {
		if _, err := os.Lstat(filepath.Join(u.Path, n)); err == nil {
			return errs.Usage{Err: fmt.Errorf("--blobs %q holds %s: a host's state directory, whose blobs its own records name too: not collected as a cluster's store", raw, n)}
		}
	}
	return nil
}

// collectNamer says which objects of the cluster's blob store what the
// cluster keeps names (cluster.Namer): a kept sandbox's bundle and
// the objects its record names; a fleet item's run bundle.
// tempName names its staging directories (serve: the host's, so that
// its GC finds what a killed collector left; nil: random names).
type collectNamer struct {
	blobs    store.Blobs
	tempName func(prefix string) string
}

func (n collectNamer) Bundle(ctx context.Context, a addr.Addr) ([]addr.Addr, error) {
	return live.BundleObjects(n.blobs, a, n.tempName)
}

func (n collectNamer) Result(kind string, result []byte) ([]addr.Addr, error) {
	if kind != fleetItemKind {
		return nil, nil // the queue's other jobs name no object
	}
	res, err := live.ParseItemResult(result)
	if err != nil {
		return nil, err
	}
	return []addr.Addr{res.Bundle}, nil
}

// clusterDSN is --cluster's value, else $SANDBOX_CLUSTER.
func clusterDSN(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv("SANDBOX_CLUSTER")
}

// openCluster opens the cluster --cluster (else $SANDBOX_CLUSTER)
// names, logging what it refuses to the command's stderr.
func openCluster(cmd *cobra.Command, dsn string) (*cluster.Cluster, error) {
	dsn = clusterDSN(dsn)
	if dsn == "" {
		return nil, errs.Usage{Err: fmt.Errorf("--cluster DSN (or $SANDBOX_CLUSTER) names the cluster's PostgreSQL")}
	}
	cl, err := cluster.Open(cmd.Context(), dsn)
	if err != nil {
		return nil, err
	}
	cl.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	return cl, nil
}

func clusterTrailCmd(g *cli.Globals) *cobra.Command {
	var dsn string
	c := &cobra.Command{
		Use:   "trail --cluster DSN",
		Short: "Print the cluster's S7 audit trail, checked, one entry a line",
		Long: `Print the S7 audit trail the cluster's hosts share (docs/cluster.md): one
entry a line, as a host's own audit.jsonl would be, after checking that
every entry is signed by the host of the cluster that wrote it and that
the entries replay to the head the database holds. The head goes to
stderr. Exits 4 when anything does not hold.`,
		Args: cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := openCluster(cmd, dsn)
			if err != nil {
				return err
			}
			defer cl.Close()
			b, head, err := cl.TrailBytes(cmd.Context())
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "FAIL  the cluster's audit trail: %v\n", err)
				return cli.ExitError{Code: 4}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: the cluster's audit trail: %d entries, head %s\n", bytes.Count(b, []byte("\n")), head)
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	c.Flags().StringVar(&dsn, "cluster", "", "the cluster's PostgreSQL (postgres://… or key=value; default $SANDBOX_CLUSTER)")
	return c
}

func clusterHostsCmd(g *cli.Globals) *cobra.Command {
	var dsn string
	var asJSON bool
	c := &cobra.Command{
		Use:   "hosts --cluster DSN [--json]",
		Short: "List the cluster's hosts whose signed rows verify, with the age of their last heartbeat",
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := openCluster(cmd, dsn)
			if err != nil {
				return err
			}
			defer cl.Close()
			hs, err := cl.Hosts(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return cli.PrintJSON(cmd.OutOrStdout(), hs)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "HOST\tTIERS\tCAPACITY\tIDLE\tADDRESS\tLAST SEEN")
			for _, h := range hs {
				var ts []string
				for _, t := range h.Tiers {
					ts = append(ts, t.String())
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%.1f W\t%s\t%s ago\n", h.ID(), strings.Join(ts, ","), h.Capacity, float64(h.IdleMW)/1000, h.Addr, h.Age.Round(time.Second))
			}
			return w.Flush()
		},
	}
	c.Flags().StringVar(&dsn, "cluster", "", "the cluster's PostgreSQL (postgres://… or key=value; default $SANDBOX_CLUSTER)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the hosts as JSON")
	return c
}

// openClusterBlobs opens where a cluster keeps suspended sandboxes'
// bundles: an S3-compatible bucket (s3://BUCKET[/PREFIX]?endpoint=…,
// credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), a
// directory every host mounts (file:///DIR), or, by default, the
// cluster's PostgreSQL (pgstore.MaxBlob a bundle).
func openClusterBlobs(ctx context.Context, dsn, raw string) (store.Blobs, func(), error) {
	switch {
	case raw == "":
		b, err := pgstore.Open(ctx, dsn)
		if err != nil {
			return nil, nil, errs.Usage{Err: fmt.Errorf("--cluster: its blob store: %w", err)}
		}
		return b, func() { b.Close() }, nil
	case strings.HasPrefix(raw, "s3://"):
		b, err := s3blobs.Open(raw)
		if err != nil {
			return nil, nil, errs.Usage{Err: fmt.Errorf("--blobs: %w", err)}
		}
		return b, func() {}, nil
	case strings.HasPrefix(raw, "file://"):
		u, err := url.Parse(raw)
		if err != nil || u.Host != "" || !filepath.IsAbs(u.Path) || u.RawQuery != "" {
			return nil, nil, errs.Usage{Err: fmt.Errorf("--blobs %q: want file:///ABSOLUTE/DIR", raw)}
		}
		s, err := store.Open(u.Path)
		if err != nil {
			return nil, nil, errs.Usage{Err: fmt.Errorf("--blobs: %w", err)}
		}
		return s, func() {}, nil
	default:
		return nil, nil, errs.Usage{Err: fmt.Errorf("--blobs %q: want s3://BUCKET[/PREFIX]?endpoint=…, file:///DIR, or nothing (the cluster's PostgreSQL)", raw)}
	}
}

// clusterShared keeps suspended sandboxes' bundles in the cluster's blob
// store, by address, and their holders in its database (live.Shared).
type clusterShared struct {
	c     *cluster.Cluster
	m     *cluster.Member
	blobs store.Blobs
	key   key.Private
	tls   *tls.Config
	// poke asks for this host's pools to be reported (PoolsChanged).
	poke chan struct{}
	// tempName names what this host makes outside its state directory.
	tempName func(prefix string) string
}

// Holder is the other host of the cluster that holds sandbox id, live
// or suspended (server.Peers): none where this host does, where the
// cluster keeps nothing of it, or where it was closed or lost.
func (s *clusterShared) Holder(ctx context.Context, id string) (server.Peer, bool, error) {
	h, err := s.c.Holder(ctx, id)
	if errors.Is(err, cluster.ErrNotShared) {
		return server.Peer{}, false, nil
	}
	if err != nil {
		return server.Peer{}, false, err
	}
	if h.Host.ID() == s.m.Host.ID() || (h.State != "live" && h.State != "suspended") {
		return server.Peer{}, false, nil
	}
	return server.Peer{ID: h.Host.ID(), Key: h.Host.Key, Addr: h.Host.Addr}, true, nil
}

// Peer is host id of the cluster, its row verified.
func (s *clusterShared) Peer(ctx context.Context, id string) (server.Peer, error) {
	h, err := s.c.Host(ctx, id)
	if err != nil {
		return server.Peer{}, err
	}
	return server.Peer{ID: h.ID(), Key: h.Key, Addr: h.Addr}, nil
}

// Self is this host's id and key.
func (s *clusterShared) Self() (string, key.Private) { return s.m.Host.ID(), s.key }

// Place chooses where a new sandbox of tier t goes: best of K hosts of
// the cluster (cluster.Place), the placement signed by this host.
func (s *clusterShared) Place(ctx context.Context, t tier.Tier) (server.Peer, *record.Placement, error) {
	hosts, err := s.c.Hosts(ctx)
	if err != nil {
		return server.Peer{}, nil, err
	}
	live, err := s.c.LiveCounts(ctx)
	if err != nil {
		return server.Peer{}, nil, err
	}
	dead := s.c.DeadAfter
	if dead <= 0 {
		dead = cluster.DefaultDeadAfter
	}
	h, p, err := cluster.Place(hosts, live, t, s.m.Host.ID(), cluster.DefaultK, dead, nil)
	if err != nil {
		return server.Peer{}, nil, err
	}
	p.By = s.key.Public()
	if err := p.Sign(s.key); err != nil {
		return server.Peer{}, nil, err
	}
	return server.Peer{ID: h.ID(), Key: h.Key, Addr: h.Addr}, &p, nil
}

// Kept says the cluster keeps a suspension of sandbox id, and its tier
// (S1 where the host that made it did not say).
func (s *clusterShared) Kept(ctx context.Context, id string) (tier.Tier, bool, error) {
	h, err := s.c.Holder(ctx, id)
	if errors.Is(err, cluster.ErrNotShared) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	t := h.Tier
	if t == 0 {
		t = tier.S1
	}
	return t, h.State == "suspended" && h.Kept, nil
}

// Sandboxes lists owner's sandboxes the cluster keeps, as the API lists
// a sandbox: what the cluster knows of each (its id, tier, state, the
// host that holds it, when it was first heard of).
func (s *clusterShared) Sandboxes(ctx context.Context, owner string) ([]client.Sandbox, error) {
	ls, err := s.c.Sandboxes(ctx, owner)
	if err != nil {
		return nil, err
	}
	out := make([]client.Sandbox, 0, len(ls))
	for _, l := range ls {
		t := l.Tier
		if t == 0 {
			t = tier.S1
		}
		out = append(out, client.Sandbox{ID: l.ID, Tier: t.String(), State: l.State, Host: l.Host, Created: l.Created, Grants: []string{}})
	}
	return out, nil
}

// PoolsChanged has this host's pools reported soon (live.PoolReporter):
// it never blocks, and changes that come before the report are in it.
func (s *clusterShared) PoolsChanged() {
	select {
	case s.poke <- struct{}{}:
	default: // a report is due already
	}
}

// PoolHolder is the other host of the cluster, alive, where a claim of
// warm pool name goes (server.Peers): one with a ready sandbox left,
// taken for this claim (cluster.ReservePool), with how many it had
// left; where none has one left, the one that keeps the pool with the
// most ready, and 0. ok false where no other host keeps one.
func (s *clusterShared) PoolHolder(ctx context.Context, name string) (server.Peer, int, bool, error) {
	ps, err := s.c.PoolHosts(ctx, name)
	if err != nil {
		return server.Peer{}, 0, false, err
	}
	dead := s.c.DeadAfter
	if dead <= 0 {
		dead = cluster.DefaultDeadAfter
	}
	others := ps[:0]
	for _, p := range ps { // most left first
		if p.Host.ID() != s.m.Host.ID() && p.Host.Age < dead {
			others = append(others, p)
		}
	}
	if len(others) == 0 {
		return server.Peer{}, 0, false, nil
	}
	peer := func(p cluster.Pool) server.Peer {
		return server.Peer{ID: p.Host.ID(), Key: p.Host.Key, Addr: p.Host.Addr}
	}
	p, ok, err := s.c.ReservePool(ctx, others)
	if err != nil {
		return server.Peer{}, 0, false, err
	}
	if ok {
		return peer(p), p.Left() + 1, true, nil // this one among them
	}
	return peer(others[0]), 0, true, nil
}

// Blobs is the cluster's blob store, where a suspension's objects are
// kept one by one (live.BlobSharer).
func (s *clusterShared) Blobs() store.Blobs { return s.blobs }

// TLS checks other hosts' certificates (--cluster-ca).
func (s *clusterShared) TLS() *tls.Config { return s.tls }

// Publish is never called: a suspension stores its objects under a
// hold on the blob store (live.BlobHolder), and publishes with
// PublishHeld. One that did not is refused.
func (s *clusterShared) Publish(ctx context.Context, id, owner string, head addr.Addr, bundle []byte) error {
	return fmt.Errorf("cluster: sandbox %s: a suspension published without a hold on the blob store: %w", id, live.ErrCollected)
}

// HoldBlobs waits while a collection of the blob store runs, and is its
// epoch (live.BlobHolder).
func (s *clusterShared) HoldBlobs(ctx context.Context) (int64, error) {
	h, err := s.c.HoldBlobs(ctx)
	return h.Epoch, err
}

// BlobEpoch is the blob store's epoch now (live.BlobHolder).
func (s *clusterShared) BlobEpoch(ctx context.Context) (int64, error) { return s.c.BlobEpoch(ctx) }

// PublishHeld keeps a suspension's bundle and the list of the objects it
// names (cluster.EncodeObjects, what a collection reads) in the blob
// store and names both in the cluster, refused where a collection began
// since epoch (live.BlobHolder). A list over cluster.MaxObjects, or one
// the store holds but not whole (a store's put keeps what it holds), is
// named by no row: a collection then reads the bundle.
func (s *clusterShared) PublishHeld(ctx context.Context, epoch int64, id, owner string, head addr.Addr, bundle []byte, named []addr.Addr) error {
	a := addr.Of(bundle)
	var la addr.Addr
	if list, ok := cluster.EncodeObjects(a, named); !ok {
		s.c.Log.Warn("a suspension names more objects than an object list holds: the sandbox's row names none, and a collection reads its bundle", "sandbox", id, "objects", len(named), "max", cluster.MaxObjects)
	} else {
		la = addr.Of(list)
		if err := s.blobs.PutBlob(la, list); err != nil {
			return err
		}
		if _, err := s.blobs.Blob(la); err != nil { // checked against la
			s.c.Log.Warn("the cluster's blob store holds a suspension's object list but not whole: the sandbox's row names none, and a collection reads its bundle", "sandbox", id, "objects", la, "err", err)
			la = addr.Addr{}
		}
	}
	if err := s.blobs.PutBlob(a, bundle); err != nil {
		return err
	}
	err := s.m.SandboxSuspended(ctx, cluster.BlobHold{Epoch: epoch}, id, owner, head, a, la)
	if errors.Is(err, cluster.ErrCollected) {
		return fmt.Errorf("%w: %w", live.ErrCollected, err)
	}
	return err
}

// asker is who takes a sandbox, as the cluster checks it: the host's own
// user is its operator, who may take any.
func asker(owner string) string {
	if owner == host.LocalOwner {
		return ""
	}
	return owner
}

func (s *clusterShared) Take(ctx context.Context, id, owner string) ([]byte, func(), error) {
	k, err := s.m.TakeSandbox(ctx, id, asker(owner))
	if errors.Is(err, cluster.ErrNotShared) {
		return nil, nil, nil
	}
	if errors.Is(err, cluster.ErrLost) || errors.Is(err, cluster.ErrClosed) || errors.Is(err, cluster.ErrNotYours) {
		return nil, nil, fmt.Errorf("%w: %v", live.ErrNoSandbox, err)
	}
	if errors.Is(err, cluster.ErrEdited) {
		return nil, nil, err // integrity: the cluster's row does not verify
	}
	if err != nil {
		return nil, nil, &host.InvalidError{Err: err}
	}
	release := func() {
		if err := s.m.ReleaseSandbox(context.Background(), id, k.Fence); err != nil {
			s.c.Log.Warn("a sandbox not given back to the cluster", "sandbox", id, "err", err)
		}
	}
	if k.Local {
		return nil, release, nil // its last suspension is this host's own: what is here is it
	}
	b, err := s.blobs.Blob(k.Bundle)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("sandbox %s's bundle %s from host %s: %w", id, k.Bundle, k.Host, err)
	}
	return b, release, nil
}

func (s *clusterShared) Made(ctx context.Context, id string, t tier.Tier, owner string) error {
	return s.m.SandboxMade(ctx, id, t, owner)
}

func (s *clusterShared) Claimed(ctx context.Context, id, owner string) error {
	return s.m.SandboxClaimed(ctx, id, owner)
}

func (s *clusterShared) Closed(ctx context.Context, id string) error {
	return s.m.SandboxClosed(ctx, id)
}

func (s *clusterShared) Trust(ctx context.Context) (key.Trust, error) {
	hs, err := s.c.Hosts(ctx)
	if err != nil {
		return key.Trust{}, err
	}
	var t key.Trust
	for _, h := range hs {
		t.Add(h.Key)
	}
	return t, nil
}

// fleetItemKind is the work queue's kind of a fleet's items.
const fleetItemKind = "fleet-item"

// itemLease is how long a host holds a fleet item it took between
// renewals (every third of it): a host that stops renewing loses it,
// and another host runs it again.
const itemLease = 60 * time.Second

// RunItem queues a fleet item for any host of the cluster (this one
// too) and waits for the one that ran it (live.Queue); kept marks its
// result taken, for the collector.
func (s *clusterShared) RunItem(ctx context.Context, payload []byte) (live.ItemResult, []byte, func(), error) {
	id, err := s.m.Enqueue(ctx, cluster.Job{Kind: fleetItemKind, Payload: payload})
	if err != nil {
		return live.ItemResult{}, nil, nil, err
	}
	st, err := s.c.Wait(ctx, id, 200*time.Millisecond)
	if err != nil {
		if ctx.Err() != nil {
			s.m.Withdraw(context.WithoutCancel(ctx), id, "its fleet ended")
		}
		return live.ItemResult{}, nil, nil, err
	}
	if st.State != "done" {
		return live.ItemResult{}, nil, nil, fmt.Errorf("job %d, run by host %s: %s", id, st.Holder, st.Reason)
	}
	if !bytes.Equal(st.Payload, payload) {
		// Its result is signed for the payload its row holds, which is
		// not this item's: another job's payload put in its row.
		s.c.Log.Warn("a fleet item's job ran another payload than was queued: its result refused", "job", id, "host", st.Holder)
		return live.ItemResult{}, nil, nil, fmt.Errorf("job %d, run by host %s: it ran another payload than this item's (its row was edited): %w", id, st.Holder, cluster.ErrEdited)
	}
	res, err := live.ParseItemResult(st.Result)
	if err != nil {
		return res, nil, nil, fmt.Errorf("job %d, run by host %s: %w", id, st.Holder, err)
	}
	b, err := s.blobs.Blob(res.Bundle)
	if err != nil {
		return res, nil, nil, fmt.Errorf("job %d, run by host %s: its run's bundle %s: %w", id, st.Holder, res.Bundle, err)
	}
	kept := func() {
		// The run is kept here: its bundle is the collector's now.
		if err := s.c.ResultTaken(context.WithoutCancel(ctx), id); err != nil {
			s.c.Log.Warn("a fleet item's result not marked taken: its run's bundle stays in the cluster's blob store", "job", id, "err", err)
		}
	}
	return res, b, kept, nil
}

// workItems takes fleet items from the cluster's queue, up to slots at
// once, runs each here and hands its run back, until ctx ends: then
// what it holds and has not run goes back to the queue.
func (s *clusterShared) workItems(ctx context.Context, ho *live.Manager, slots int, log *slog.Logger) {
	if slots <= 0 {
		return
	}
	sem := make(chan struct{}, slots)
	release := func(n int) {
		for range n {
			<-sem
		}
	}
	const idleMin, idleMax = 20 * time.Millisecond, 500 * time.Millisecond
	idle := idleMin
	// It returns once every item it took has ended or gone back.
	defer func() {
		for range slots {
			sem <- struct{}{}
		}
	}()
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1
	fill:
		for n < slots {
			select {
			case sem <- struct{}{}:
				n++
			default:
				break fill
			}
		}
		ls, err := s.m.ClaimN(ctx, n, itemLease, fleetItemKind)
		if err != nil {
			release(n)
			if ctx.Err() != nil {
				return
			}
			if !errors.Is(err, cluster.ErrNoJob) {
				log.Warn("cluster: taking fleet items", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(idle):
			}
			idle = min(2*idle, idleMax)
			continue
		}
		idle = idleMin
		release(n - len(ls))
		for _, l := range ls {
			go func() {
				defer release(1)
				s.workItem(ctx, ho, l, log)
			}()
		}
	}
}

// handBack puts an item's run bundle in the cluster's blob store and
// completes l's job with a result naming it, both under a hold on the
// store: put again where a collection began in between.
func (s *clusterShared) handBack(ctx context.Context, l *cluster.Lease, res live.ItemResult, bundle []byte) error {
	res.Bundle = addr.Of(bundle)
	result, err := json.Marshal(res)
	if err != nil {
		return err
	}
	for try := 1; ; try++ {
		hold, err := s.c.HoldBlobs(ctx)
		if err != nil {
			return err
		}
		if err := s.blobs.PutBlob(res.Bundle, bundle); err != nil {
			return err
		}
		err = s.m.CompleteHeld(ctx, hold, l, result)
		if !errors.Is(err, cluster.ErrCollected) || try == live.HeldTries {
			return err
		}
	}
}

// workItem runs one fleet item this host took, renewing its lease while
// it runs, and ends its job: done with the run's result, failed with
// the reason, or given back if this host stops first.
func (s *clusterShared) workItem(ctx context.Context, ho *live.Manager, l *cluster.Lease, log *slog.Logger) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		t := time.NewTicker(itemLease / 3)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			if err := s.m.Renew(rctx, l, itemLease); errors.Is(err, cluster.ErrStaleFence) {
				cancel() // another host holds it now: its outcome is that one's
				return
			}
		}
	}()
	res, bundle, err := ho.RunItem(rctx, l.Job.Payload)
	after := context.WithoutCancel(ctx)
	if ctx.Err() != nil {
		// This host is stopping: the item goes back for another.
		if err := s.m.Release(after, l); err != nil {
			log.Warn("cluster: a fleet item not given back", "job", l.ID, "err", err)
		}
		return
	}
	if err == nil {
		if err := s.handBack(after, l, res, bundle); err != nil {
			log.Warn("cluster: a fleet item's result not recorded", "job", l.ID, "run", res.Run, "err", err)
			return
		}
		log.Info("a fleet item ran here", "job", l.ID, "queued_by", l.By, "run", res.Run)
		return
	}
	log.Warn("cluster: a fleet item failed here", "job", l.ID, "queued_by", l.By, "err", err)
	if err := s.m.Fail(after, l, err.Error()); err != nil {
		log.Warn("cluster: a fleet item's failure not recorded", "job", l.ID, "err", err)
	}
}
