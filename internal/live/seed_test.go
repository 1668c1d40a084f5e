package live

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/lifecycle"
	"github.com/opensubstrate/sandbox/internal/tree"
)

// gitRepo makes a repository on the host with a commit on ref; it
// returns its path and the commit.
func gitRepo(t *testing.T, ref string) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed (scripts/deps installs it)")
	}
	dir := filepath.Join(t.TempDir(), "src")
	g := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	os.MkdirAll(dir, 0o755)
	g("init", "-q", "-b", ref)
	os.WriteFile(filepath.Join(dir, "README"), []byte("seeded\n"), 0o644)
	os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("build/\n"), 0o644)
	g("add", ".")
	g("commit", "-q", "-m", "first")
	return dir, g("rev-parse", "HEAD")
}

func seedGrants(t *testing.T, src string) grant.Set {
	t.Helper()
	g, err := grant.ParseArgs([]string{"cpu:5J", "fs:" + src + ":ro"}, "/")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// seedHost is an S1 host, a repository with one commit on main, and a
// maker of sandboxes that may read it.
func seedHost(t *testing.T) (*Manager, string, string, func() string) {
	t.Helper()
	h := newS1Host(t)
	src, head := gitRepo(t, "main")
	return h, src, head, func() string {
		info, err := h.Create(context.Background(), SandboxSpec{Grants: seedGrants(t, src)})
		if err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
}

func ownerClaim(ref, head string) *lifecycle.Claim {
	return &lifecycle.Claim{Run: "run-1", Requester: "alice", Thread: "th-9", Repository: "acme/widgets", Ref: ref, Head: head}
}

// TestSeedBindsTheExactCheckout: a claimed seed marks its attempt,
// checks the checkout out in the sandbox (its .git too), binds the claim
// and the origin, and verifies the head; the lifecycle record proves
// the owner; a repeated seed with the same identity answers as the
// original did and leaves a checkout whose HEAD moved untouched.
func TestSeedBindsTheExactCheckout(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	src, head := gitRepo(t, "feature/a+b")
	info, err := h.Create(ctx, SandboxSpec{Grants: seedGrants(t, src)})
	if err != nil {
		t.Fatal(err)
	}
	req := SeedRequest{Source: src, Ref: "feature/a+b", Claim: ownerClaim("feature/a+b", head), Origin: "https://git.example.com/acme/widgets.git"}
	res, err := h.Seed(ctx, info.ID, "", req)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != lifecycle.StateBound || res.Head != head || res.Cached || len(res.Runs) != 2 {
		t.Fatalf("%+v", res)
	}
	v := h.readLifecycle(info.ID)
	if c, ok := v.Owner(); v.Class != lifecycle.Bound || !ok || c != *req.Claim || v.Record.Origin != req.Origin || v.Record.Seed.Head != head {
		t.Fatalf("lifecycle: %s %+v", v.Class, v.Record)
	}
	if _, out := execIn(t, h, info.ID, "sh", "-c", "cat README; test -d .git && echo git"); out != "seeded\ngit\n" {
		t.Fatalf("the checkout: %q", out)
	}
	// Work moves HEAD; a retry of the same seed keeps it.
	execIn(t, h, info.ID, "sh", "-c", "echo wip > wip && git -c user.name=a -c user.email=a@b add wip && git -c user.name=a -c user.email=a@b commit -qm wip")
	req.Incarnation = res.Incarnation
	again, err := h.Seed(ctx, info.ID, "", req)
	if err != nil || !again.Cached || again.Head != head {
		t.Fatalf("the retry: %+v %v", again, err)
	}
	if _, out := execIn(t, h, info.ID, "sh", "-c", "cat wip; git log --oneline | wc -l"); out != "wip\n2\n" {
		t.Fatalf("after the retry: %q", out)
	}
	// Every other retry is refused before the checkout or origin is touched.
	for name, mut := range map[string]func(*SeedRequest){
		"another owner":       func(r *SeedRequest) { c := *r.Claim; c.Requester = "mallory"; r.Claim = &c },
		"no claim":            func(r *SeedRequest) { r.Claim = nil },
		"a changed origin":    func(r *SeedRequest) { r.Origin = "https://evil.example.com/x.git" },
		"a missing origin":    func(r *SeedRequest) { r.Origin = "" },
		"another incarnation": func(r *SeedRequest) { r.Incarnation = strings.Repeat("0", 32) },
		"a credential origin": func(r *SeedRequest) { r.Origin = "https://u:p@git.example.com/x.git" },
	} {
		r := req
		mut(&r)
		var se *SeedError
		if _, err := h.Seed(ctx, info.ID, "", r); !errors.As(err, &se) || se.Stage != "refused" {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, out := execIn(t, h, info.ID, "cat", "wip"); out != "wip\n" {
		t.Fatal("a refused retry touched the checkout")
	}
	// Idle: a bound, verified seed parks; its checkpoint is the owner's.
	h.StartIdle(200 * time.Millisecond)
	waitIdle(t, h, 1, 0)
	if cp := h.readLifecycle(info.ID).Checkpoint(); cp == nil || cp.Owner != req.Claim.Digest() {
		t.Fatalf("checkpoint %+v", cp)
	}
}

// TestSeedAttemptsStayProtected: an unclaimed seed works and stays
// pending (no owner: the fence retains it); a claimed seed whose checkout
// is not at the claim's head stays bound but unverified (retained); a
// mark changed between the seed's two reads refuses before any sweep.
func TestSeedAttemptsStayProtected(t *testing.T) {
	h, src, head, mk := seedHost(t)
	ctx := context.Background()
	unclaimed := mk()
	if res, err := h.Seed(ctx, unclaimed, "", SeedRequest{Source: src, Ref: "main"}); err != nil || res.State != lifecycle.StatePending || res.Head != head {
		t.Fatalf("unclaimed: %+v %v", res, err)
	}
	wrong := mk()
	_, err := h.Seed(ctx, wrong, "", SeedRequest{Source: src, Ref: "main", Claim: ownerClaim("main", strings.Repeat("1", 40)), Origin: "https://git.example.com/a.git"})
	var se *SeedError
	if !errors.As(err, &se) || se.Stage != "verify" {
		t.Fatalf("a wrong head: %v", err)
	}
	if v := h.readLifecycle(wrong); v.Class != lifecycle.BoundUnverified {
		t.Fatalf("after a wrong head: %s", v.Class)
	}
	swapped := mk()
	execIn(t, h, swapped, "sh", "-c", "echo mine > precious")
	afterSeedMark = func(id string) {
		os.WriteFile(h.lifecyclePath(id), []byte(`{"v":1}`), 0o600) // a writer replaced the mark
	}
	defer func() { afterSeedMark = nil }()
	if _, err := h.Seed(ctx, swapped, "", SeedRequest{Source: src, Ref: "main", Claim: ownerClaim("main", head)}); !errors.As(err, &se) || !strings.Contains(err.Error(), "nothing was swept") {
		t.Fatalf("a changed mark: %v", err)
	}
	afterSeedMark = nil
	if _, out := execIn(t, h, swapped, "cat", "precious"); out != "mine\n" {
		t.Fatal("the workspace was swept")
	}
	// None of the three is parked at its idle deadline.
	h.StartIdle(100 * time.Millisecond)
	waitIdle(t, h, 0, 3)
	if p, _ := h.IdleStats(); p != 0 {
		t.Fatalf("%d parked", p)
	}
	// Refused before anything: a source outside the grants, a bad ref.
	other := mk()
	for name, r := range map[string]SeedRequest{
		"ungranted source": {Source: "/etc", Ref: "main"},
		"reserved ref":     {Source: src, Ref: "a..b"},
		"credential URL":   {Source: "https://u:p@example.com/x.git", Ref: "main"},
		"ssh URL":          {Source: "ssh://example.com/x.git", Ref: "main"},
		"relative":         {Source: "src", Ref: "main"},
		"claim ref":        {Source: src, Ref: "main", Claim: ownerClaim("dev", head)},
	} {
		if _, err := h.Seed(ctx, other, "", r); !errors.As(err, &se) || se.Stage != "refused" {
			t.Errorf("%s: %v", name, err)
		}
	}
	if v := h.readLifecycle(other); v.Class != lifecycle.Unseeded {
		t.Fatalf("a refused seed marked the record: %s", v.Class)
	}
}

// TestPassiveReceiptReadsOnlyDurableFacts: a receipt for the exact
// owner, seed and incarnation says present, lost or unknown from the
// lifecycle record and the store alone; every wrong owner, seed or
// incarnation is refused alike, disclosing nothing; it never wakes,
// resumes or touches a sandbox, live or parked.
func TestPassiveReceiptReadsOnlyDurableFacts(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	src, head := gitRepo(t, "main")
	info, err := h.Create(ctx, SandboxSpec{Grants: seedGrants(t, src)})
	if err != nil {
		t.Fatal(err)
	}
	claim := ownerClaim("main", head)
	res, err := h.Seed(ctx, info.ID, "", SeedRequest{Source: src, Ref: "main", Claim: claim, Origin: "https://git.example.com/a.git"})
	if err != nil {
		t.Fatal(err)
	}
	req := ReceiptRequest{Sandbox: info.ID, Claim: *claim, Source: src, Incarnation: res.Incarnation}
	// Live, no checkpoint yet: unknown, never present; the sandbox untouched.
	sb, _ := h.sandbox(info.ID, "")
	before := sb.activity.Load()
	if r, err := h.Receipt(req); err != nil || r.State != ReceiptUnknown || r.Checkpoint != "" {
		t.Fatalf("live: %+v %v", r, err)
	}
	if sb.activity.Load() != before {
		t.Fatal("the receipt touched the live sandbox")
	}
	if _, err := h.Suspend(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	// An explicit suspension writes no checkpoint into the lifecycle
	// record; the idle fence does. Park it through the fence.
	if _, err := h.Resume(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	v := h.readLifecycle(info.ID)
	req.Incarnation = v.Record.Incarnation
	h.StartIdle(100 * time.Millisecond)
	waitIdle(t, h, 1, 0)
	r, err := h.Receipt(req)
	if err != nil || r.State != ReceiptPresent || r.Checkpoint == "" {
		t.Fatalf("parked: %+v %v", r, err)
	}
	if p := recordPhase(t, h, info.ID); p != "parked" {
		t.Fatalf("the receipt woke it: %s", p)
	}
	if _, err := h.sandbox(info.ID, ""); err == nil {
		t.Fatal("the receipt started it")
	}
	for name, mut := range map[string]func(*ReceiptRequest){
		"another requester":   func(q *ReceiptRequest) { q.Claim.Requester = "mallory" },
		"another head":        func(q *ReceiptRequest) { q.Claim.Head = strings.Repeat("2", 40) },
		"another thread":      func(q *ReceiptRequest) { q.Claim.Thread = "t-0" },
		"another source":      func(q *ReceiptRequest) { q.Source = "/elsewhere" },
		"another incarnation": func(q *ReceiptRequest) { q.Incarnation = strings.Repeat("a", 32) },
		"another sandbox":     func(q *ReceiptRequest) { q.Sandbox = "sb-000000000000" },
	} {
		q := req
		mut(&q)
		got, err := h.Receipt(q)
		if !errors.Is(err, ErrNoReceipt) || got.Checkpoint != "" || got.State != "" {
			t.Errorf("%s: %+v %v", name, got, err)
		}
	}
	for name, mut := range map[string]func(*ReceiptRequest){
		"malformed sandbox":     func(q *ReceiptRequest) { q.Sandbox = "../x" },
		"malformed claim":       func(q *ReceiptRequest) { q.Claim.Ref = "a..b" },
		"malformed incarnation": func(q *ReceiptRequest) { q.Incarnation = "x" },
		"no source":             func(q *ReceiptRequest) { q.Source = "" },
	} {
		q := req
		mut(&q)
		var ie *host.InvalidError
		if _, err := h.Receipt(q); !errors.As(err, &ie) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A chunk of the checkpoint gone from the store: lost.
	root, _ := addr.Parse(r.Checkpoint)
	tr, err := tree.Load(h.Store, root)
	if err != nil {
		t.Fatal(err)
	}
	removed := false
	for _, e := range tr.Entries {
		if len(e.Chunks) > 0 && !removed {
			os.Remove(h.Store.Path("blobs", e.Chunks[0].Hex()))
			removed = true
		}
	}
	if r, err := h.Receipt(req); err != nil || r.State != ReceiptLost {
		t.Fatalf("a chunk gone: %+v %v", r, err)
	}
}

// TestSeedRefusesRecordsItCannotActOn: a sandbox whose lifecycle record
// is of an unsupported version is refused before anything is written or
// swept (the record stays as it was); a legacy record, which has no
// origin bound at birth, is never upgraded by a retry; the sandbox
// itself cannot read or change its lifecycle record; and an update never
// changes a bound owner or origin.
func TestSeedRefusesRecordsItCannotActOn(t *testing.T) {
	t.Parallel()
	h, src, head, mk := seedHost(t)
	ctx := context.Background()
	req := SeedRequest{Source: src, Ref: "main", Claim: ownerClaim("main", head), Origin: "https://git.example.com/a.git"}
	v2 := mk()
	os.WriteFile(h.lifecyclePath(v2), []byte(`{"v":2}`), 0o600)
	execIn(t, h, v2, "sh", "-c", "echo mine > precious")
	var se *SeedError
	if _, err := h.Seed(ctx, v2, "", req); !errors.As(err, &se) || !se.Unavailable() {
		t.Fatalf("an unsupported record: %v", err)
	}
	if b, _ := os.ReadFile(h.lifecyclePath(v2)); string(b) != `{"v":2}` {
		t.Fatalf("rewritten: %s", b)
	}
	if _, out := execIn(t, h, v2, "cat", "precious"); out != "mine\n" {
		t.Fatal("swept")
	}
	legacy := mk()
	lb, _ := json.Marshal(map[string]any{"owner": req.Claim, "checkpoint": lifecycle.Checkpoint{Root: "b3:" + strings.Repeat("0", 64), Owner: req.Claim.Digest(), Incarnation: strings.Repeat("1", 32), Taken: time.Now(), RetainUntil: time.Now().Add(time.Hour)}})
	os.WriteFile(h.lifecyclePath(legacy), lb, 0o600)
	if _, err := h.Seed(ctx, legacy, "", req); !errors.As(err, &se) || !strings.Contains(err.Error(), "legacy") {
		t.Fatalf("a legacy record: %v", err)
	}
	// Out of the sandbox's reach.
	bound := mk()
	if _, err := h.Seed(ctx, bound, "", req); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"cat", "rm"} {
		r, _ := execIn(t, h, bound, cmd, h.lifecyclePath(bound))
		if r.Result.Outcome.ExitCode == nil || *r.Result.Outcome.ExitCode == 0 {
			t.Fatalf("the sandbox reached its lifecycle record (%s)", cmd)
		}
	}
	if v := h.readLifecycle(bound); v.Class != lifecycle.Bound {
		t.Fatalf("%s", v.Class)
	}
	// An update never changes what a seed bound.
	for name, mut := range map[string]func(*lifecycle.Record){
		"owner":  func(r *lifecycle.Record) { c := *r.Claim; c.Requester = "mallory"; r.Claim = &c },
		"origin": func(r *lifecycle.Record) { r.Origin = "https://other.example.com/a.git" },
		"unbind": func(r *lifecycle.Record) {
			r.Claim, r.Origin, r.State, r.Verified = nil, "", lifecycle.StateUnseeded, false
		},
	} {
		err := h.updateLifecycle(bound, false, func(r *lifecycle.Record) (*lifecycle.Record, error) {
			n := *r
			mut(&n)
			return &n, nil
		})
		if err == nil {
			t.Errorf("%s changed", name)
		}
	}
	if v := h.readLifecycle(bound); v.Class != lifecycle.Bound || *v.Record.Claim != *req.Claim {
		t.Fatalf("after refused updates: %s", v.Class)
	}
}

// httpsSource serves a bare copy of a fresh repository (one commit on
// main) over git's dumb HTTP protocol with TLS, to requests that carry
// bearer; it returns the source URL, the head, the grants a sandbox needs
// to fetch it (its net grant, the CA bundle's directory read-only), the
// CA bundle, and the count of authorized requests.
func httpsSource(t *testing.T, bearer string) (string, string, []string, string, *atomic.Int32) {
	t.Helper()
	root := t.TempDir()
	work, head := gitRepo(t, "main")
	if out, err := exec.Command("git", "clone", "-q", "--bare", work, filepath.Join(root, "repo.git")).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if out, err := exec.Command("git", "-C", filepath.Join(root, "repo.git"), "update-server-info").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	authorized := &atomic.Int32{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+bearer {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		authorized.Add(1)
		http.FileServer(http.Dir(root)).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644)
	return srv.URL + "/repo.git", head, []string{"cpu:5J", "fs:" + filepath.Dir(ca) + ":ro", "net:" + strings.TrimPrefix(srv.URL, "https://")}, ca, authorized
}

// TestSeedOverHTTPSNeverStoresTheBearer: a seed from an https source
// through the sandbox's net grant, authorized by a bearer: the server
// saw the bearer, the checkout is there, and the bearer is nowhere in
// the state directory (records, runs, units, lifecycle) or the checkout.
func TestSeedOverHTTPSNeverStoresTheBearer(t *testing.T) {
	t.Parallel()
	h, _, _, _ := seedHost(t)
	ctx := context.Background()
	const bearer = "tok-7f3a9c2e51d84b6f"
	source, head, gs, ca, authorized := httpsSource(t, bearer)
	g, err := grant.ParseArgs(gs, "/")
	if err != nil {
		t.Fatal(err)
	}
	info, err := h.Create(ctx, SandboxSpec{Grants: g, Env: map[string]string{"GIT_SSL_CAINFO": ca}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Seed(ctx, info.ID, "", SeedRequest{Source: source, Ref: "main", Claim: ownerClaim("main", head), Bearer: bearer})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != lifecycle.StateBound || authorized.Load() == 0 {
		t.Fatalf("%+v, %d authorized requests", res, authorized.Load())
	}
	if v := h.readLifecycle(info.ID); v.Record.Origin != source {
		t.Fatalf("origin %q", v.Record.Origin)
	}
	if _, out := execIn(t, h, info.ID, "cat", "README"); out != "seeded\n" {
		t.Fatalf("the checkout: %q", out)
	}
	noBearer(t, bearer, h.Store.Dir.Root, info.Workspace)
	// Without the bearer the server refuses, and so does the seed.
	other, err := h.Create(ctx, SandboxSpec{Grants: g, Env: map[string]string{"GIT_SSL_CAINFO": ca}})
	if err != nil {
		t.Fatal(err)
	}
	var se *SeedError
	if _, err := h.Seed(ctx, other.ID, "", SeedRequest{Source: source, Ref: "main", Claim: ownerClaim("main", head)}); !errors.As(err, &se) || se.Stage != "checkout" {
		t.Fatalf("without the bearer: %v", err)
	}
}

// noBearer fails t if bearer is in any file under dirs.
func noBearer(t *testing.T, bearer string, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(bearer)) {
				t.Errorf("the bearer is in %s", p)
			}
			return nil
		})
	}
}

// trapListener is a guest's trap, in perl: it listens on 127.0.0.1:PORT
// in its sandbox and logs every request's header lines to FILE.
const trapListener = `use IO::Socket::INET; my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $ARGV[0], Listen => 16, ReuseAddr => 1) or die "listen: $!"; ` +
	`open(my $log, ">>", $ARGV[1]) or die; $log->autoflush(1); ` +
	`while (my $c = $s->accept) { while (my $l = <$c>) { print $log $l; last if $l eq "\r\n" || $l eq "\n"; } print $c "HTTP/1.0 404 Not Found\r\n\r\n"; close $c; }`

// TestSeedGuestTamperingGitConfigGetsNoBearer: the attack that read a
// seed's bearer. A guest runs a listener of its own and, while the seed
// runs, keeps adding to its workspace's .git/config a proxy, no TLS
// verification, plain http allowed, and the source rewritten to its
// listener. The seed's git never reads that file: the fetch runs in a
// run of its own, in a directory the sandbox cannot reach, its
// configuration the host's. The seed binds, the server saw the bearer,
// and the guest's listener (which works: it logged the guest's own
// probe) saw no request of the seed's and no bearer.
func TestSeedGuestTamperingGitConfigGetsNoBearer(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("perl is not installed: the guest's listener is a perl program")
	}
	h, _, _, _ := seedHost(t)
	ctx := context.Background()
	const bearer = "tok-d41d8cd98f00b204"
	source, head, gs, ca, authorized := httpsSource(t, bearer)
	// The trap spins in the background while its exec waits: more CPU
	// than the usual 5 J buys on a busy machine. The budget is not under
	// test.
	gs[0] = "cpu:1000J"
	g, err := grant.ParseArgs(gs, "/")
	if err != nil {
		t.Fatal(err)
	}
	const port = 8765
	info, err := h.Create(ctx, SandboxSpec{Grants: g, Env: map[string]string{"GIT_SSL_CAINFO": ca}, Listen: []int{port}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(info.Workspace, "trap.pl"), []byte(trapListener), 0o644); err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSuffix(source, "repo.git")
	trap := fmt.Sprintf(`cp trap.pl /tmp/trap.pl && perl /tmp/trap.pl %d /tmp/trap.log >/dev/null 2>&1 &
( while :; do
  if [ -f .git/config ] && ! grep -q 127.0.0.1:%d .git/config 2>/dev/null; then
    printf '[protocol "http"]\n\tallow = always\n[url "http://127.0.0.1:%d/"]\n\tinsteadOf = %s\n[http]\n\tproxy = http://127.0.0.1:%d\n\tsslVerify = false\n' >> .git/config
  fi
done ) >/dev/null 2>&1 &
perl -MIO::Socket::INET -e 'for (1..1200) { last if $c = IO::Socket::INET->new("127.0.0.1:%d"); select(undef, undef, undef, 0.1) } $c or die "connect: $!"; print $c "GET /probe HTTP/1.0\r\nX-Probe: guest\r\n\r\n"; <$c>;'`,
		port, port, port, base, port, port)
	if r, out := execIn(t, h, info.ID, "sh", "-c", trap); r.Result.Outcome.ExitCode == nil || *r.Result.Outcome.ExitCode != 0 {
		t.Fatalf("the trap: %+v %s", r.Result.Outcome, out)
	}
	if _, log := execIn(t, h, info.ID, "cat", "/tmp/trap.log"); !strings.Contains(log, "X-Probe: guest") {
		t.Fatalf("the guest's listener does not work, so this test could not fail: %q", log)
	}
	res, err := h.Seed(ctx, info.ID, "", SeedRequest{Source: source, Ref: "main", Claim: ownerClaim("main", head), Bearer: bearer})
	_, log := execIn(t, h, info.ID, "cat", "/tmp/trap.log")
	if strings.Contains(log, bearer) || strings.Contains(log, "repo.git") {
		t.Fatalf("the guest's listener saw the seed's requests (bearer leaked: %v):\n%s", strings.Contains(log, bearer), log)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.State != lifecycle.StateBound || res.Head != head || authorized.Load() == 0 {
		t.Fatalf("%+v, %d authorized requests", res, authorized.Load())
	}
	noBearer(t, bearer, h.Store.Dir.Root, info.Workspace)
}

// TestSeedHeadIsReadFromTheFetchedObjects: the attack that made a wrong
// head read as verified. The source's main is at its second commit; the
// claim names the first; a guest keeps moving its workspace's main to
// the claim's head (git update-ref) while the seed runs. The head is
// read by the host from the objects it fetched, never from the
// sandbox's checkout: the seed is not verified (bound, unverified,
// retained) and nothing is checked out. With the claim at the true head
// and the same guest at work, the seed verifies, and its head is the
// source's.
func TestSeedHeadIsReadFromTheFetchedObjects(t *testing.T) {
	t.Parallel()
	h, src, first, mk := seedHost(t)
	ctx := context.Background()
	cmd := exec.Command("git", "-C", src, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "second")
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	out, err := exec.Command("git", "-C", src, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	second := strings.TrimSpace(string(out))
	mover := fmt.Sprintf(`( while :; do git -c safe.directory='*' update-ref refs/heads/main %s >/dev/null 2>&1; done ) >/dev/null 2>&1 & echo started`, first)
	wrong := mk()
	if _, o := execIn(t, h, wrong, "sh", "-c", mover); o != "started\n" {
		t.Fatal(o)
	}
	_, err = h.Seed(ctx, wrong, "", SeedRequest{Source: src, Ref: "main", Claim: ownerClaim("main", first), Origin: "https://git.example.com/a.git"})
	var se *SeedError
	if !errors.As(err, &se) || se.Stage != "verify" || !strings.Contains(err.Error(), second) {
		t.Fatalf("a claim of the old head, the guest moving its checkout to it: %v", err)
	}
	if v := h.readLifecycle(wrong); v.Class != lifecycle.BoundUnverified {
		t.Fatalf("after a wrong head: %s", v.Class)
	}
	if _, o := execIn(t, h, wrong, "sh", "-c", "ls -A | wc -l"); o != "0\n" {
		t.Fatalf("a checkout landed for a head that is not the claim's: %q entries", o)
	}
	right := mk()
	if _, o := execIn(t, h, right, "sh", "-c", mover); o != "started\n" {
		t.Fatal(o)
	}
	res, err := h.Seed(ctx, right, "", SeedRequest{Source: src, Ref: "main", Claim: ownerClaim("main", second), Origin: "https://git.example.com/a.git"})
	if err != nil || res.State != lifecycle.StateBound || res.Head != second {
		t.Fatalf("the true head: %+v %v", res, err)
	}
}
