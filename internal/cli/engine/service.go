package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/manifest"
	"github.com/opensubstrate/sandbox/internal/mcp"
	"github.com/opensubstrate/sandbox/internal/server"
	"github.com/opensubstrate/sandbox/internal/volume"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/tier"
)

// The service: the host API for live sandboxes, execs, files and
// one-shot runs (serve), and its tools for MCP clients (mcp).

// serveHelp is serve's --help.
const serveHelp = `Serve the host API (docs/api.md; the OpenAPI document is served at
/v1/openapi.json) on a unix socket in the state directory (serve.sock,
mode 0600: only this user, or root, is served, checked by the peer's
credentials), and with --listen on TCP with TLS (--tls-cert, --tls-key)
and bearer tokens (--token-file: one token per line; each token sees only
the sandboxes it created).

Each token is a principal that may grant only what its policy allows
(docs/api.md, "Authority"): a token-file line is the token, then,
optionally, the path of its policy document (sandbox.policy/1, relative
to the token file). A token without one may grant nothing on the host
beyond its own sandboxes' workspaces: no host directory, no network, no
secret, no key-value namespace; S1, S2 and S5; the CPU at any budget;
any imported image. The local user at the socket may grant anything.
A refusal is 403 denied, names the grant and the rule, and is kept in
the decision log (authority.jsonl in the state directory; 'sandbox
policy log').

While it runs, 'sandbox create', 'exec', 'cp', 'ps' and 'rm' talk to it
(found by its socket, or $SANDBOX_HOST). Every run it starts is sealed
exactly as 'sandbox run' seals one. /metrics is Prometheus text; /v1/health
says it is alive. Logs are structured, on stderr.

On SIGINT or SIGTERM it stops taking requests, lets execs in flight
finish for --grace, then interrupts those still running (each is sealed,
outcome killed), suspends every live sandbox through the preservation
fence (a later service resumes it: 'sandbox resume'; one the fence
retains, or that cannot be suspended, keeps its workspace and record as
they are, its processes ending with the service, for the next service
to park) and exits 0. Nothing running is dropped unsealed, and no
workspace is erased. Started, it first makes whole what an ended service
left: its live sandboxes are suspended from their workspaces as they
were left.

--workspace-max SIZE bounds each live sandbox's workspace (default
10GiB; 0 for none): the workspace is a filesystem of its own of that
size (ext4 in a sparse image beside it, on a loop device: root only), so
a writer past it gets ENOSPC as it writes (EIO for a WebAssembly module:
wazero has no ENOSPC), at S1, S2 and S5 alike; the bound is in each
exec's unit (limits.workspace_bytes) and an exec that ends with the
workspace full says so in its attestation's notes. Without root the
default gives way (each exec's notes say why); a bound given here is
never dropped: sandboxes are refused instead.

--workspace-pool SIZE|auto makes those workspace images in a filesystem
that shares extents (XFS with reflinks), so that 'sandbox fork' copies
no data: each child's workspace is a copy of the parent's image sharing
every block. Only where the system's temporary directory cannot share
extents itself (ext4, tmpfs; on XFS or btrfs the workspaces stay there
and no pool is made), and only for bounded workspaces: the service then
makes the pool, a sparse XFS image of SIZE (at most what is free there
less a reserve of a tenth of that filesystem, at least 1 GiB; auto: all
of that), as sandbox-volumes in that directory, or mounts the one a
service made before, whatever its size. It is the host's, like the temporary
directory: it stays mounted when the service stops, other services use
it, and it gives back the space of each workspace removed. Like the
images themselves, it counts on the space under it staying free. Root
only, with mkfs.xfs (xfsprogs).

--output-max SIZE is how much of each of a run's streams its record
keeps (default 64MiB): the caller receives every byte, and the journal's
outcome gives the whole stream's length and BLAKE3 beside the prefix
kept; the attestation's notes say what was dropped.

--idle DURATION parks a live sandbox that no request has touched for
that long (an exec's end counts as a touch). It passes the preservation
fence first (docs/preservation.md): it is parked (suspended: its
workspace, .git and ignored files included, captured and verified, the
checkpoint written into its lifecycle record) only when its cgroup reads
back frozen from the kernel, its owner and incarnation are proved and no
request came meanwhile; otherwise it is retained as it is, live, and
tried again one idle period later. A stuck exec (still running) is
retained. Nothing is ever destroyed for being idle. /metrics counts
sandbox_idle_parked_total and sandbox_idle_retained_total.

--pool NAME:KEY=VALUE,... keeps a warm pool of ready S1 sandboxes, made
ahead, that 'sandbox create --pool NAME' (POST /v1/pools/NAME/claim)
hands over at once. Keys: size=N (how many it keeps ready; default 2),
image=REF or manifest=FILE (what each is made from: an imported image,
a devcontainer.json or a signed manifest; default the host's system
directories), max-idle=DURATION (with no claim for that long it evicts
what it keeps and makes no more until the next claim; default none),
max-age=DURATION (a ready sandbox older than that is evicted and
replaced; default none). A claimed sandbox's record begins with a
claimed segment carrying the energy spent keeping it ready (its cgroup's
CPU time since it was made, priced by the Estimator); an evicted one is
closed with that overhead. /metrics has each pool's statistics
(sandbox_pool_*). Ready sandboxes are evicted when the service stops.

--ui also serves the web console (docs/console.md) on the --listen
address, at https://HOST:PORT/ui/: live sandboxes with their state and
an exec terminal, runs with their receipts and energy per device class
over time, run records as their chains of segments, fleets and their
items' inclusion proofs. Open it with a token of --token-file in the
address's fragment (https://HOST:PORT/ui/#token=TOKEN: a fragment is
never sent to the service), or paste the token into the page; the page
keeps it in the tab's sessionStorage and sends it as a bearer token on
every call, checked as any client's: it sees only what that token sees.
Attestations, receipts, record seals and fleet proofs are checked in the
browser (WebCrypto Ed25519, SHA-256; BLAKE3 in the page's own code)
against the host key GET /v1/key names. Everything the page needs is
served by this binary (no CDN; a Content-Security-Policy of 'self'
alone, no inline script, no framing). --ui needs --listen.

With --listen the service also serves port previews ('sandbox port',
POST /v1/sandboxes/ID/ports) at https://HOST:PORT/preview/TOKEN/: each
reaches one listen port of a live S1 sandbox, for whoever has its URL,
until it expires or is revoked; its pages are given an opaque origin
(Content-Security-Policy: sandbox), never the service's. With
--preview-listen ADDR they are served there instead, an origin apart
from the API's and the console's (recommended where the console is
served), at https://HOST:PORT/preview/TOKEN/ with HOST as the API was
reached and PORT the preview listener's.`

// serveOptions are serve's flags.
type serveOptions struct {
	socket, listen, certFile, keyFile, tokenFile, logFormat string
	cluster, blobs, clusterCA, previewListen                string
	grace, idleAfter, gcEvery                               time.Duration
	maxLive, itemSlots                                      int
	poolArgs                                                []string
	workspaceMax, outputMax, workspacePool                  string
	ui                                                      bool
}

func serveCmd(g *cli.Globals) *cobra.Command {
	var o serveOptions
	c := &cobra.Command{
		Use:   "serve",
		Short: "Serve the host API: live sandboxes, execs, files, one-shot runs (HTTP/JSON)",
		Long:  serveHelp,
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, tokens, err := o.check(cmd, g)
			if err != nil {
				return err
			}
			g.Warm, g.Log = true, log
			ho, err := hostOf(g)
			if err != nil {
				return err
			}
			if err := o.configure(cmd, ho, log); err != nil {
				return err
			}
			return o.serve(cmd.Context(), ho, log, tokens)
		},
	}
	c.Flags().StringVar(&o.socket, "socket", "", "unix socket to serve on (default: serve.sock in the state directory)")
	c.Flags().StringVar(&o.listen, "listen", "", "also serve on this TCP address (HOST:PORT), with TLS and tokens")
	c.Flags().StringVar(&o.certFile, "tls-cert", "", "TLS certificate (PEM) for --listen")
	c.Flags().StringVar(&o.keyFile, "tls-key", "", "TLS key (PEM) for --listen")
	c.Flags().StringVar(&o.tokenFile, "token-file", "", "bearer tokens for --listen, one per line, each optionally followed by its policy file")
	c.Flags().DurationVar(&o.grace, "grace", 30*time.Second, "on shutdown, how long execs in flight may finish before they are interrupted (and sealed)")
	c.Flags().DurationVar(&o.idleAfter, "idle", 0, "park a live sandbox that no request touched for this long, through the preservation fence (see above; default: never)")
	c.Flags().IntVar(&o.maxLive, "max-sandboxes", 0, "live sandboxes kept at once (default 1024); more are refused with 429")
	c.Flags().StringVar(&o.workspaceMax, "workspace-max", "10GiB", "size bound of each live sandbox's workspace, enforced as it is written (see above; 0: none)")
	c.Flags().StringVar(&o.workspacePool, "workspace-pool", "", "make workspaces in an XFS pool of this size (auto: what is free, less a reserve) where the temporary directory has no reflinks, so that forks copy no data (see above; default: none)")
	c.Flags().StringVar(&o.outputMax, "output-max", "64MiB", "bytes of each of a run's streams its record keeps; the caller receives all (see above)")
	c.Flags().StringArrayVar(&o.poolArgs, "pool", nil, "keep a warm pool of ready sandboxes: NAME:size=N,image=REF|manifest=FILE,max-idle=D,max-age=D (see above; repeatable)")
	c.Flags().StringVar(&o.previewListen, "preview-listen", "", "with --listen: serve port previews on this address (an origin apart from the API's and the console's) instead of on --listen")
	c.Flags().BoolVar(&o.ui, "ui", false, "with --listen: also serve the web console at https://HOST:PORT/ui/ (open it with #token=TOKEN; see above)")
	c.Flags().StringVar(&o.logFormat, "log-format", "text", "log lines as text or json")
	c.Flags().StringVar(&o.blobs, "blobs", "", "with --cluster: where suspended sandboxes' bundles are kept for other hosts: s3://BUCKET[/PREFIX]?endpoint=http://HOST:PORT (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), file:///DIR (a directory every host mounts); default the cluster's PostgreSQL")
	c.Flags().StringVar(&o.cluster, "cluster", "", "join the cluster whose PostgreSQL this names (postgres://… or key=value; docs/cluster.md): register this host, signed with its key, and heartbeat")
	c.Flags().StringVar(&o.clusterCA, "cluster-ca", "", "with --cluster: the certificates (PEM) other hosts' --listen certificates are checked against when a request is forwarded to them (default: the system's roots)")
	c.Flags().IntVar(&o.itemSlots, "cluster-workers", runtime.NumCPU(), "with --cluster: fleet items from the cluster's queue this host runs at once, any host's fleet (0: none; it still queues its own fleets' items for the others)")
	c.Flags().DurationVar(&o.gcEvery, "cluster-gc-every", 0, "with --cluster: collect the cluster's blob store (and prune the queue's ended jobs) from this host this often, as 'sandbox cluster gc' does (e.g. 24h; one host is enough, and a collection another host runs is left to it; hosts wait to suspend while one runs; default: never)")
	g.LimitFlags(c, "a native run's or a live S1 sandbox's")
	return c
}

// check checks the flags that need no engine, and makes the log and
// reads the tokens they name.
func (o *serveOptions) check(cmd *cobra.Command, g *cli.Globals) (*slog.Logger, []authority.Token, error) {
	var h slog.Handler = slog.NewTextHandler(cmd.ErrOrStderr(), nil)
	if o.logFormat == "json" {
		h = slog.NewJSONHandler(cmd.ErrOrStderr(), nil)
	} else if o.logFormat != "text" {
		return nil, nil, errs.Usage{Err: fmt.Errorf("--log-format %q: want text or json", o.logFormat)}
	}
	if err := g.CheckLimitFlags(0); err != nil {
		return nil, nil, err
	}
	if o.itemSlots < 0 {
		return nil, nil, errs.Usage{Err: fmt.Errorf("--cluster-workers %d: 0 or more", o.itemSlots)}
	}
	if o.clusterCA != "" && o.cluster == "" {
		return nil, nil, errs.Usage{Err: errors.New("--cluster-ca checks the certificates of a cluster's hosts: it needs --cluster")}
	}
	if o.blobs != "" && o.cluster == "" {
		return nil, nil, errs.Usage{Err: errors.New("--blobs is where a cluster keeps suspended sandboxes: it needs --cluster")}
	}
	if o.gcEvery < 0 || o.gcEvery > 0 && o.cluster == "" {
		return nil, nil, errs.Usage{Err: fmt.Errorf("--cluster-gc-every %s: a duration above zero, with --cluster (or 0: never)", o.gcEvery)}
	}
	if o.gcEvery > 0 {
		if err := notAStateDir(o.blobs); err != nil {
			return nil, nil, err
		}
	}
	if (o.certFile == "") != (o.keyFile == "") || o.listen != "" && (o.certFile == "" || o.tokenFile == "") {
		return nil, nil, errs.Usage{Err: errors.New("--listen needs --tls-cert, --tls-key and --token-file: the API is never served in clear or without tokens")}
	}
	if o.idleAfter < 0 {
		return nil, nil, errs.Usage{Err: fmt.Errorf("--idle %s: a duration of zero (never) or more", o.idleAfter)}
	}
	if o.previewListen != "" && o.listen == "" {
		return nil, nil, errs.Usage{Err: errors.New("--preview-listen needs --listen (with --tls-cert, --tls-key and --token-file): previews are made through the API and served with its certificate")}
	}
	if o.ui && o.listen == "" {
		return nil, nil, errs.Usage{Err: errors.New("--ui needs --listen (with --tls-cert, --tls-key and --token-file): a browser cannot reach the unix socket, and the console is never served in clear or without tokens")}
	}
	var tokens []authority.Token
	if o.tokenFile != "" {
		var err error
		if tokens, err = readTokens(o.tokenFile); err != nil {
			return nil, nil, err
		}
	}
	return slog.New(h), tokens, nil
}

// configure sets the manager's bounds and pools from the flags, makes
// whole what ended services left, and starts the idle fence.
func (o *serveOptions) configure(cmd *cobra.Command, ho *live.Manager, log *slog.Logger) error {
	var err error
	if o.maxLive > 0 {
		ho.MaxLive(o.maxLive)
	}
	// Unset, the host's default bound applies (and gives way where
	// it cannot be enforced); set, it is the operator's, never dropped.
	if cmd.Flags().Changed("workspace-max") {
		if ho.WorkspaceMax, err = sizeFlag("--workspace-max", o.workspaceMax, volume.MinSize); err != nil {
			return err
		}
	}
	if ho.OutputMax, err = sizeFlag("--output-max", o.outputMax, 0); err != nil {
		return err
	}
	if o.workspacePool != "" {
		// Before what ended services left is collected: their
		// workspaces may lie in the pool.
		size, err := poolSize(o.workspacePool)
		if err != nil {
			return err
		}
		dir, err := ho.UsePool("", size)
		if err != nil {
			return fmt.Errorf("--workspace-pool %s: %w", o.workspacePool, err)
		}
		// A pool made before keeps its size: SIZE is a new one's.
		if u, ok, err := volume.Of(dir); err == nil && ok {
			log.Info("workspaces in a volume pool", "dir", dir, "size", u.Size, "free", u.Avail)
		} else {
			log.Info("workspaces where they share extents, no pool needed", "dir", dir)
		}
	}
	for _, a := range o.poolArgs {
		ps, err := parsePool(a, ho)
		if err != nil {
			return err
		}
		if err := ho.StartPool(ps); err != nil {
			return errs.Usage{Err: fmt.Errorf("--pool %s: %w", a, err)}
		}
	}
	// What ended services left: their live sandboxes' records are
	// made whole (suspended, resumable) before anything is served.
	if ls, err := ho.Collect(); err != nil {
		log.Warn("collecting what ended processes left", "err", err)
	} else {
		for _, l := range ls {
			log.Info("collected", "what", l.Kind, "path", l.Path, "err", l.Err)
		}
	}
	ho.StartIdle(o.idleAfter)
	return nil
}

// serve serves the API until ctx ends, then shuts down: no more
// requests, execs in flight given the grace, then interrupted and
// sealed, live sandboxes suspended.
func (o *serveOptions) serve(ctx context.Context, ho *live.Manager, log *slog.Logger, tokens []authority.Token) error {
	socket := o.socket
	if socket == "" {
		socket = ho.Store.Path(client.SocketName)
	}
	if o.cluster != "" {
		// Joined before anything is served: a request for a sandbox
		// must find the cluster's word on it.
		addr := socket
		if o.listen != "" {
			addr = o.listen
		}
		leave, err := joinCluster(ctx, o, ho, addr, log)
		if err != nil {
			return err
		}
		defer leave() // after ho.Close below: its suspensions are published
	}
	ln, err := listenUnix(socket)
	if err != nil {
		return err
	}
	defer os.Remove(socket)
	// Each token is a principal with the policy written beside
	// it (authority.Default where none is).
	ho.Policies = map[string]authority.Policy{}
	for _, t := range tokens {
		ho.Policies[server.OwnerOf(t.Secret)] = t.Policy
	}
	s := &server.Server{Live: ho, Log: log, Tokens: secrets(tokens)}
	if cs, ok := ho.Shared().(*clusterShared); ok {
		s.Peers = cs
	}
	var servers []*http.Server
	us := s.UnixServer()
	servers = append(servers, us)
	errc := make(chan error, 2)
	go func() { errc <- us.Serve(ln) }()
	go jcpSchedule(ctx, ho, log)
	log.Info("serving", "socket", socket, "state", ho.Store.Root())
	if o.listen != "" {
		cert, err := tls.LoadX509KeyPair(o.certFile, o.keyFile)
		if err != nil {
			return errs.Usage{Err: fmt.Errorf("--tls-cert/--tls-key: %w", err)}
		}
		tl, err := tls.Listen("tcp", o.listen, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		if err != nil {
			return err
		}
		h := s.TCP(s.Handler())
		if o.ui {
			h = s.WithConsole(h) // the web console at /ui/ (docs/console.md)
		}
		if o.previewListen == "" {
			h = s.WithPreviews(h, tl.Addr().String()) // port previews at /preview/ (sandbox port)
		} else {
			// Previews on an origin of their own, apart from the API's
			// and the console's.
			pl, err := tls.Listen("tcp", o.previewListen, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
			if err != nil {
				tl.Close()
				return err
			}
			ps := &http.Server{Handler: s.PreviewsApart(pl.Addr().String()), BaseContext: s.BaseContext, ReadHeaderTimeout: 10 * time.Second}
			servers = append(servers, ps)
			go func() { errc <- ps.Serve(pl) }()
			log.Info("serving port previews", "tcp", pl.Addr().String())
		}
		ts := &http.Server{Handler: h, BaseContext: s.BaseContext, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, ts)
		go func() { errc <- ts.Serve(tl) }()
		log.Info("serving", "tcp", tl.Addr().String(), "tokens", len(tokens))
		if o.ui {
			log.Info("serving the web console", "url", "https://"+tl.Addr().String()+"/ui/#token=TOKEN")
		}
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	o.shutdown(s, servers, log)
	if err := ho.Close(); err != nil {
		log.Error("ending live sandboxes", "err", err)
	}
	log.Info("stopped")
	return nil
}

// shutdown stops the servers taking requests, lets execs in flight
// finish for the grace, then interrupts those still running (each is
// sealed) and waits for their handlers.
// jcpSchedule mints under the scheduled standing JCP grants (every:N)
// each second while the service serves.
func jcpSchedule(ctx context.Context, ho *live.Manager, log *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	prev := ho.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := ho.Now()
		if _, _, err := ho.JCPTick(prev, now); err != nil {
			log.Warn("JCP schedule", "err", err)
		}
		prev = now
	}
}

func (o *serveOptions) shutdown(s *server.Server, servers []*http.Server, log *slog.Logger) {
	log.Info("shutting down: taking no more requests; execs in flight may finish", "grace", o.grace)
	ctx, cancel := context.WithTimeout(context.Background(), o.grace)
	defer cancel()
	done := make(chan struct{})
	go func() {
		for _, srv := range servers {
			srv.Shutdown(ctx)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		log.Warn("grace over: interrupting the execs still running; each is sealed")
		s.Shutdown(errors.New("the service is shutting down"))
		<-done
		// Shutdown returned at the deadline; the handlers now end
		// as their runs are sealed.
		wait, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		for _, srv := range servers {
			srv.Shutdown(wait)
		}
		cancel()
	}
}

// listenUnix listens on a unix socket only this user may use. The socket
// is made in a fresh directory only this user may enter, made 0600 there
// and then renamed into place, so that no one else can connect in
// between; the process's umask is never changed (it is the whole
// process's, and a run started meanwhile would inherit it). A socket
// left by a service that ended is replaced; one that answers is another
// service's, and is refused.
func listenUnix(path string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("a service is already serving on %s", path)
	}
	private, err := os.MkdirTemp(filepath.Dir(path), ".serve-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, "s")
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// parsePool reads a --pool argument: NAME:KEY=VALUE,...
func parsePool(arg string, ho *live.Manager) (live.PoolSpec, error) {
	name, rest, _ := strings.Cut(arg, ":")
	ps := live.PoolSpec{Name: name, Size: 2, Sandbox: live.SandboxSpec{Tier: tier.S1}}
	bad := func(format string, a ...any) (live.PoolSpec, error) {
		return ps, errs.Usage{Err: fmt.Errorf("--pool %s: "+format, append([]any{arg}, a...)...)}
	}
	if name == "" {
		return bad("want NAME:KEY=VALUE,...")
	}
	for _, kv := range strings.Split(rest, ",") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" {
			return bad("%q: want KEY=VALUE", kv)
		}
		var err error
		switch k {
		case "size":
			if ps.Size, err = strconv.Atoi(v); err != nil || ps.Size < 1 {
				return bad("size %q: want a whole number from 1", v)
			}
		case "image":
			ps.Sandbox.Image = v
		case "manifest":
			b, err := cli.ReadDevcontainer(v)
			if err != nil {
				return bad("%v", err)
			}
			m, err := manifest.Verify(b, key.NewTrust(ho.Key.Public()))
			if err != nil {
				dc, derr := manifest.FromDevcontainer(b)
				if derr != nil {
					return bad("%s is neither a manifest this host signed (%v) nor a devcontainer.json (%v)", v, err, derr)
				}
				if m, err = manifest.Seal(dc, ho.Key); err != nil {
					return ps, err
				}
			}
			ps.Sandbox.Manifest = m
		case "max-idle", "max-age":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return bad("%s %q: want a duration such as 10m", k, v)
			}
			if k == "max-idle" {
				ps.MaxIdle = d
			} else {
				ps.MaxAge = d
			}
		default:
			return bad("unknown key %q (size, image, manifest, max-idle, max-age)", k)
		}
	}
	return ps, nil
}

// readTokens reads a token file: one bearer token per line (at least 16
// characters), optionally followed by its policy file; '#' comments.
func readTokens(path string) ([]authority.Token, error) {
	toks, err := authority.ReadTokens(path)
	if err != nil {
		return nil, errs.Usage{Err: fmt.Errorf("--token-file: %w", err)}
	}
	return toks, nil
}

// secrets are the tokens' secrets.
func secrets(toks []authority.Token) []string {
	var out []string
	for _, t := range toks {
		out = append(out, t.Secret)
	}
	return out
}

// poolSize reads --workspace-pool: auto (0: what is free, less a
// reserve) or a size of at least volume.MinPool.
func poolSize(v string) (int64, error) {
	if v == "auto" {
		return 0, nil
	}
	n, err := grant.ParseSize(v)
	if err != nil {
		return 0, errs.Usage{Err: fmt.Errorf("--workspace-pool %s: want auto or a size: %w", v, err)}
	}
	if n < volume.MinPool {
		return 0, errs.Usage{Err: fmt.Errorf("--workspace-pool %s: under %d bytes, the least a pool is made with", v, volume.MinPool)}
	}
	return n, nil
}

// sizeFlag reads a size flag: bytes (KiB, MiB, GiB, ...). With a
// least size (a bound that may be none), "0" is no bound (-1) and a size
// under the least is refused.
func sizeFlag(flag, v string, least int64) (int64, error) {
	n, err := grant.ParseSize(v)
	switch {
	case err != nil:
		return 0, errs.Usage{Err: fmt.Errorf("%s %s: %w", flag, v, err)}
	case n == 0 && least > 0:
		return -1, nil
	case n <= 0:
		return 0, errs.Usage{Err: fmt.Errorf("%s %s: want a size above zero", flag, v)}
	case n < least:
		return 0, errs.Usage{Err: fmt.Errorf("%s %s: under %d bytes, the least it can be (or 0 for none)", flag, v, least)}
	}
	return n, nil
}

func mcpCmd(g *cli.Globals) *cobra.Command {
	var httpAddr, tokenFile, policyFile, jcpFile, jcpAs string
	c := &cobra.Command{
		Use:   "mcp [--policy FILE] [--jcp FILE --as NAME] [--http ADDR --token-file FILE]",
		Short: "Serve the sandbox's tools to an MCP client (stdio, or streamable HTTP)",
		Long: `Serve the Model Context Protocol: an agent's MCP client gets tools to
create a sandbox (create_sandbox), run a command in it with its output
(exec), read, write and list its files (read_file, write_file,
list_files), suspend, resume and close it, list them (list_sandboxes),
verify a sealed run (verify_run) and show its energy receipt
(show_receipt).

Every tool calls the running service ('sandbox serve', found as the
other commands find it) through its API, as the CLI does: the same
grants, owner and limits. A failure is a JSON-RPC error whose code is
its category's (invalid -32602, not-found -32010, integrity -32011,
untrusted -32012, denied -32013, unavailable -32014, canceled -32015,
limit -32016, internal -32603), its data naming the category; a
command that exits non-zero is a result. An exec's output is cut at
1 MiB per stream (said when cut); a file read or written at 4 MiB. A
client that goes away mid-exec interrupts the exec, which is sealed.

By default it speaks over standard input and output (an MCP client
starts it). --http ADDR serves streamable HTTP at http://ADDR/mcp on a
loopback address only, and needs --token-file (one bearer token per
line, 16 characters or more): every request must carry one. Its
callers act as the service's own user.

Each connection is a principal held to a policy (docs/mcp.md): what its
model may grant in create_sandbox, and what a sandbox it acts in may
hold. By default that is the policy of a token with none: no host
directory beyond its own sandboxes' workspaces, no network, no secret,
no key-value namespace; S1, S2 and S5; the CPU at any budget. --policy
FILE gives the connections another (sandbox.policy/1); over --http, a
token-file line may name its token's own policy after it. A tool's
arguments are the model's: they can only narrow the connection's
policy, never widen it. The service checks every grant against it and
refuses the rest as denied (-32013), naming the grant and the rule.

--jcp FILE --as NAME spends from a JCP grant (docs/mcp.md): every exec
is presented with the chain in FILE, with a fresh invocation signed by
the principal NAME (the audience of its last grant, a key kept in the
state directory, as 'sandbox run --jcp' reads it: it never leaves this
process), so the service's gate decides each one before it runs. The
agent gets jcp_budget (its chain's budgets), jcp_delegate (a narrower
child of its grant for another key, signed here and admitted by the
service; one that widens is refused with its code) and jcp_checkpoint.
No tool amends or revokes a grant: an agent never amends its own.`,
		Args: cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var tokens []authority.Token
			policy := authority.Default()
			if policyFile != "" {
				b, err := os.ReadFile(policyFile)
				if err == nil {
					policy, err = authority.Parse(b)
				}
				if err != nil {
					return errs.Usage{Err: fmt.Errorf("--policy %s: %w", policyFile, err)}
				}
			}
			if httpAddr != "" {
				if tokenFile == "" {
					return errs.Usage{Err: errors.New("--http needs --token-file: the tools act as the service's own user")}
				}
				host, _, err := net.SplitHostPort(httpAddr)
				if err != nil {
					return errs.Usage{Err: fmt.Errorf("--http %q: %w", httpAddr, err)}
				}
				if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
					return errs.Usage{Err: fmt.Errorf("--http %q: a loopback address only (127.0.0.1, ::1, localhost)", httpAddr)}
				}
				if tokens, err = readTokens(tokenFile); err != nil {
					return err
				}
			} else if tokenFile != "" {
				return errs.Usage{Err: errors.New("--token-file is for --http")}
			}
			principal, err := mcpPrincipal(g, jcpFile, jcpAs)
			if err != nil {
				return err
			}
			cl, err := g.Client()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// Every call of a connection carries its policy: the service
			// holds the connection to it.
			narrowed := func(p authority.Policy) (*sdk.Server, error) {
				doc, err := p.Marshal()
				if err != nil {
					return nil, err
				}
				return mcp.New(cl.Narrowed(doc), cli.ModuleVersion(), mcp.Options{JCP: principal}), nil
			}
			if httpAddr == "" {
				srv, err := narrowed(policy)
				if err != nil {
					return err
				}
				return srv.Run(ctx, &sdk.StdioTransport{})
			}
			servers := map[string]*sdk.Server{}
			for _, t := range tokens {
				p := policy
				if t.PolicyFile != "" {
					p = t.Policy
				}
				if servers[t.Secret], err = narrowed(p); err != nil {
					return err
				}
			}
			ln, err := net.Listen("tcp", httpAddr)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			mux := http.NewServeMux()
			mux.Handle("/mcp", bearer(secrets(tokens), sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
				tok, _ := server.Bearer(r, secrets(tokens))
				return servers[tok]
			}, &sdk.StreamableHTTPOptions{Logger: log})))
			hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			log.Info("serving MCP", "url", "http://"+ln.Addr().String()+"/mcp")
			errc := make(chan error, 1)
			go func() { errc <- hs.Serve(ln) }()
			select {
			case <-ctx.Done():
				hs.Close()
				return nil
			case err := <-errc:
				return err
			}
		},
	}
	c.Flags().StringVar(&httpAddr, "http", "", "serve streamable HTTP on this loopback address (host:port) instead of stdio")
	c.Flags().StringVar(&tokenFile, "token-file", "", "bearer tokens for --http, one per line, each optionally followed by its policy file")
	c.Flags().StringVar(&policyFile, "policy", "", "the policy every connection is held to (default: a token's default: nothing on the host beyond its own sandboxes' workspaces)")
	c.Flags().StringVar(&jcpFile, "jcp", "", "a JCP chain file: every exec is presented with it, and the JCP tools are served")
	c.Flags().StringVar(&jcpAs, "as", "", "with --jcp: the principal presenting the chain (its last grant's audience), a key kept in the state directory")
	return c
}

// bearer lets through requests that carry one of tokens.
func bearer(tokens []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, found := server.Bearer(r, tokens); !found {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-mcp"`)
			http.Error(w, "a bearer token from --token-file is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
