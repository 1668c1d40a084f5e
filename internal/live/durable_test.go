package live

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/tree"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// A live sandbox is a durable run: each exec an Executed segment; a
// suspension freezes it, keeps its workspace by address, appends
// Suspended and only then tears it down (nothing of it runs); a
// resumption restores the workspace, starts it again and appends
// Resumed with the idle energy of the parked interval; rm closes it.
func TestSuspendResumeS1(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h.Clock = func() time.Time { return now }
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t), Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	ws := info.Workspace
	r1, _ := execIn(t, h, info.ID, "sh", "-c", `mkdir -p d && printf 'kept\n' > d/f && head -c 3000000 /dev/urandom > big && ln -s d/f link && mkfifo pipe && (sleep 302 &) ; echo started`)
	if r1.Result.Outcome.Status != "exited" {
		t.Fatalf("%+v", r1.Result.Outcome)
	}
	snap, err := h.Suspend(ctx, info.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the workspace was not torn down: %v", err)
	}
	if l := processesWith(t, "sleep 302"); len(l) > 0 {
		t.Fatalf("a process of the suspended sandbox runs: %v", l)
	}
	var pe *ParkedError
	if _, err := h.Exec(ctx, info.ID, "", ExecRequest{Args: []string{"true"}}); !errors.As(err, &pe) {
		t.Fatalf("exec while parked: %v", err)
	}
	f, err := record.Open(h.RecordPath(info.ID))
	if err != nil {
		t.Fatal(err)
	}
	st := f.State()
	f.Close()
	if st.Phase != record.Parked || st.Executed != 1 || !st.Last.Equal(snap) {
		t.Fatalf("record after suspend: %+v", st)
	}

	now = now.Add(24 * time.Hour)
	info2, err := h.Resume(ctx, info.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if info2.ID != info.ID || info2.Workspace == "" {
		t.Fatalf("%+v", info2)
	}
	_, out := execIn(t, h, info.ID, "sh", "-c", `cat link; wc -c < big; echo $GREETING; test -e pipe && echo "the fifo came back"`)
	if out != "kept\n3000000\nhi\n" {
		t.Fatalf("after resume: %q", out)
	}
	if _, err := h.Resume(ctx, info.ID, ""); err == nil {
		t.Fatal("a live sandbox was resumed")
	}
	if err := h.Remove(info.ID, ""); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(h.RecordPath(info.ID))
	st, err = record.VerifyBytes(b)
	if err != nil || st.Phase != record.Ended || st.Executed != 2 || st.Segments != 5 {
		t.Fatalf("the record at the end: %+v %v\n%s", st, err, b)
	}
	// 3 MB and a little, retained once (the tree: no copy of the
	// workspace is kept beside it) for a day at 1.2 W/TB: ~0.31 J.
	if st.IdleUJ < 300_000 || st.IdleUJ > 330_000 {
		t.Fatalf("idle energy %d µJ", st.IdleUJ)
	}
	if !strings.Contains(string(b), `"idle_provenance":"Estimator storage-retention/1`) {
		t.Fatalf("%s", b)
	}
	// What the durable run cost: its executions' receipts and its idle.
	ls, err := h.Records(host.LocalOwner)
	if err != nil || len(ls) != 1 || ls[0].ActiveUJ == 0 || ls[0].IdleUJ != st.IdleUJ || ls[0].TotalUJ != ls[0].ActiveUJ+ls[0].IdleUJ || ls[0].RunsMissing != 0 {
		t.Fatalf("records: %+v %v", ls, err)
	}
	// A record that names one run twice does not verify, and so counts
	// no run's energy twice.
	lines := strings.SplitAfter(string(b), "\n")
	forged := strings.Join(append(append(append([]string{}, lines[:5]...), lines[1]), lines[5:]...), "")
	os.WriteFile(h.RecordPath(info.ID), []byte(forged), 0o600)
	if ls, err := h.Records(host.LocalOwner); err != nil || len(ls) != 1 || !strings.Contains(ls[0].Err, "executed at segment 1 already") || ls[0].ActiveUJ != 0 {
		t.Fatalf("records of a record naming a run twice: %+v %v", ls, err)
	}
	os.WriteFile(h.RecordPath(info.ID), b, 0o600)
	// Each exec cites the record: its genesis, and the head it continued.
	if c := r1.Attestation.Claim.Record; c == nil || c.Genesis != record.Genesis(st.Header.Unit, st.Header.Grants) || c.Head != c.Genesis {
		t.Fatalf("the first exec's citation: %+v", c)
	}
	runDir := func(a addr.Addr) string { return h.Store.Path("runs", a.Hex()) }
	if _, rs, err := (&verify.Verifier{Trust: key.NewTrust(h.Key.Public())}).Record(b, runDir); err != nil || len(rs) == 0 {
		t.Fatalf("the record and its runs: %v", err)
	}
	if _, _, err := (&verify.Verifier{}).Record(b, runDir); !errors.Is(err, reject.UntrustedKey) {
		t.Fatalf("with the host's key not trusted: %v", err)
	}
}

// A second suspension of a little-changed workspace stores only what
// changed; a resumption elsewhere than the recorded environment, or of a
// snapshot that is not the recorded one, is refused by its code.
func TestResumePreconditionsOnTheHost(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Tier: tier.S2})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(info.Workspace, "f"), []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := h.Suspend(ctx, info.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	// A copy beside the snapshot (an earlier version kept one) that
	// changed while parked is not the recorded tree: the resumption
	// restores from the store.
	kept := h.parkedDir(info.ID)
	if err := os.MkdirAll(kept, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(kept, "f"), []byte("forked"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Resume(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	in, _ := h.Sandbox(info.ID, "")
	if b, _ := os.ReadFile(filepath.Join(in.Workspace, "f")); string(b) != "v1" {
		t.Fatalf("resumed from a changed copy: %q", b)
	}
	if snap, err = h.Suspend(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	// The retained tree changed in the store: the restore refuses it.
	tb, _ := h.Store.Blob(snap.Root)
	os.WriteFile(h.Store.Path("blobs", snap.Root.Hex()), append(tb, ' '), 0o600)
	if _, err := h.Resume(ctx, info.ID, ""); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("a tampered snapshot: %v", err)
	}
	os.WriteFile(h.Store.Path("blobs", snap.Root.Hex()), tb, 0o600)
	// Another environment: S2's manifest is not S1's.
	rec, _ := os.ReadFile(h.RecordPath(info.ID))
	s1env, err := h.environment(tier.S1, addr.Addr{}, addr.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(rec), "\n")
	bad := strings.Join(append(lines[:len(lines)-2], strings.Replace(lines[len(lines)-2], snap.Manifest.String(), s1env.String(), 1), ""), "\n")
	seals, _ := os.ReadFile(record.SealPath(h.RecordPath(info.ID)))
	os.WriteFile(h.RecordPath(info.ID), []byte(bad), 0o600)
	// Its seals no longer fit what the record now says.
	if _, err := h.Resume(ctx, info.ID, ""); !errors.Is(err, reject.HeadMismatch) {
		t.Fatalf("a record changed under its seals: %v", err)
	}
	// A record without seals (kept before seals were) is sealed by its
	// host as it stands: then the environment is what refuses it.
	os.Remove(record.SealPath(h.RecordPath(info.ID)))
	if _, err := h.Resume(ctx, info.ID, ""); !errors.Is(err, reject.ManifestMismatch) {
		t.Fatalf("another environment: %v", err)
	}
	os.WriteFile(h.RecordPath(info.ID), rec, 0o600)
	os.WriteFile(record.SealPath(h.RecordPath(info.ID)), seals, 0o600)
	if _, err := h.Resume(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	if err := h.CloseRecord(info.ID, "", "done"); err != nil {
		t.Fatal(err)
	}
}

// Resume on another host: suspended on A, exported, imported and
// resumed on B (another state directory, another key), an exec there,
// closed. B's exec cites the record; the whole record verifies with both
// keys trusted and fails with either one missing.
func TestResumeOnAnotherHost(t *testing.T) {
	t.Parallel()
	a, b := newS1Host(t), newS1Host(t)
	if a.Key.Public() == b.Key.Public() {
		t.Fatal("the two hosts share a key")
	}
	ctx := context.Background()
	info, err := a.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	run, _ := execIn(t, a, info.ID, "sh", "-c", "echo from A > a.txt")
	snap, err := a.Suspend(ctx, info.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	var bundle bytes.Buffer
	if err := a.Export(info.ID, &bundle); err != nil {
		t.Fatal(err)
	}
	raw := bundle.Bytes()
	// Every object the record names must come in the bundle (or be here
	// already): a bundle without one is refused whole, naming it.
	ws, err := tree.Load(a.Store, snap.Root)
	if err != nil {
		t.Fatal(err)
	}
	var chunk addr.Addr
	for _, e := range ws.Entries {
		if e.Path == "a.txt" {
			chunk = e.Chunks[0]
		}
	}
	for _, tc := range []struct{ drop, names string }{
		{"blobs/" + chunk.Hex(), chunk.String()},
		{"blobs/" + snap.Root.Hex(), snap.Root.String()},
		{"blobs/" + snap.Manifest.Hex(), snap.Manifest.String()},
		{"runs/" + run.ID.Hex() + "/" + verify.FileReceipt, "receipt"},
		{"runs/" + run.ID.Hex() + "/" + verify.FileStdout, host.FileStdout},
	} {
		if _, err := b.Import(ctx, bytes.NewReader(without(t, raw, tc.drop)), host.LocalOwner, key.NewTrust(a.Key.Public())); !errors.Is(err, reject.Missing) || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("a bundle without %s: %v", tc.drop, err)
		}
		if _, err := os.Stat(b.RecordPath(info.ID)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a bundle without %s left its record", tc.drop)
		}
	}
	im, err := b.Import(ctx, bytes.NewReader(raw), host.LocalOwner, key.NewTrust(a.Key.Public()))
	if err != nil || im.Sandbox != info.ID || im.Phase != record.Parked || im.Runs != 1 {
		t.Fatalf("import: %+v %v", im, err)
	}
	if _, err := b.Resume(ctx, info.ID, host.LocalOwner); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r, err := b.Exec(ctx, info.ID, host.LocalOwner, ExecRequest{Args: []string{"cat", "a.txt"}, Stdout: &out, Deadline: 20 * time.Second})
	if err != nil || out.String() != "from A\n" {
		t.Fatalf("exec on B: %v %q", err, out.String())
	}
	if c := r.Attestation.Claim.Record; c == nil || r.Attestation.Claim.Signer != b.Key.Public() {
		t.Fatalf("B's exec: %+v", r.Attestation.Claim)
	}
	if err := b.Remove(info.ID, host.LocalOwner); err != nil {
		t.Fatal(err)
	}
	rec, _ := os.ReadFile(b.RecordPath(info.ID))
	runDir := func(x addr.Addr) string { return b.Store.Path("runs", x.Hex()) }
	both := key.NewTrust(a.Key.Public(), b.Key.Public())
	st, _, err := (&verify.Verifier{Trust: both}).Record(rec, runDir)
	if err != nil || st.Phase != record.Ended || st.Executed != 2 {
		t.Fatalf("with both keys: %+v %v", st, err)
	}
	for name, k := range map[string]key.Public{"A's": a.Key.Public(), "B's": b.Key.Public()} {
		if _, _, err := (&verify.Verifier{Trust: key.NewTrust(k)}).Record(rec, runDir); !errors.Is(err, reject.UntrustedKey) {
			t.Errorf("with only %s key trusted: %v", name, err)
		}
	}
	// The same bundle again changes nothing; one whose record differs is
	// a splice; one with a blob that is not what it says is refused whole.
	if _, err := b.Import(ctx, bytes.NewReader(raw), host.LocalOwner, key.NewTrust(a.Key.Public())); !errors.Is(err, reject.Splice) {
		t.Fatalf("an older bundle over a longer record: %v", err)
	}
	c := newS1Host(t)
	bad := bytes.Replace(raw, []byte("from A\n"), []byte("from X\n"), 1)
	if bytes.Equal(bad, raw) {
		t.Fatal("the bundle holds no chunk to change")
	}
	if _, err := c.Import(ctx, bytes.NewReader(bad), host.LocalOwner, key.NewTrust(a.Key.Public())); !errors.Is(err, reject.Address) {
		t.Fatalf("a changed chunk: %v", err)
	}
	if _, err := os.Stat(c.RecordPath(info.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused bundle left its record")
	}
}

// without is the bundle raw with its entries named drop left out.
func without(t *testing.T, raw []byte, drop ...string) []byte {
	t.Helper()
	var out bytes.Buffer
	tr, tw := tar.NewReader(bytes.NewReader(raw)), tar.NewWriter(&out)
	found := 0
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(drop, hd.Name) {
			found++
			continue
		}
		if err := tw.WriteHeader(hd); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	if found != len(drop) {
		t.Fatalf("the bundle has %d of the entries %v", found, drop)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
