package live

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/host/hosttest"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/internal/volume"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// TestExecOutputIsBoundedInTheRecord: an exec that prints more than the
// host's output bound streams every byte to its caller, while its record
// keeps only the bound's prefix of the stream; the journal's outcome
// names the whole stream (length, BLAKE3) and the prefix kept, the
// attestation's notes say what was dropped, the run verifies, and a file
// that is not the kept prefix does not.
func TestExecOutputIsBoundedInTheRecord(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	const bound = 256 << 10
	h.OutputMax = bound
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	// 3 MiB of random bytes on stdout, a short line on stderr.
	blob := make([]byte, 3<<20)
	rand.Read(blob)
	if err := os.WriteFile(filepath.Join(info.Workspace, "blob"), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	r, err := h.Exec(ctx, info.ID, "", ExecRequest{Args: []string{"sh", "-c", "cat blob; echo done >&2"}, Stdout: &out, Stderr: &errb, Deadline: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), blob) {
		t.Fatalf("the caller received %d bytes, not the %d written", out.Len(), len(blob))
	}
	stored, err := os.ReadFile(filepath.Join(r.Dir, host.FileStdout))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, blob[:bound]) {
		t.Fatalf("stdout.log holds %d bytes, want the first %d written", len(stored), bound)
	}
	if b, _ := os.ReadFile(filepath.Join(r.Dir, host.FileStderr)); string(b) != "done\n" {
		t.Fatalf("stderr.log %q", b)
	}
	jb, err := os.ReadFile(filepath.Join(r.Dir, verify.FileJournal))
	if err != nil {
		t.Fatal(err)
	}
	entries, _, err := journal.Parse(jb)
	if err != nil {
		t.Fatal(err)
	}
	o, err := journal.LastOutcome(entries)
	if err != nil {
		t.Fatal(err)
	}
	if o.StdoutLen != uint64(len(blob)) || o.Stdout != addr.Of(blob) || o.StdoutKept == nil || o.StdoutKept.Len != bound || o.StdoutKept.Addr != addr.Of(blob[:bound]) || o.StderrKept != nil {
		t.Fatalf("the outcome: %+v", o)
	}
	found := false
	for _, n := range r.Attestation.Claim.Notes {
		found = found || strings.Contains(n, "stdout.log keeps the first 262144 of the 3145728 bytes") && strings.Contains(n, addr.Of(blob).String())
	}
	if !found {
		t.Fatalf("no note says what was dropped: %q", r.Attestation.Claim.Notes)
	}
	if !strings.Contains(errb.String(), "sandbox: stdout.log keeps the first") {
		t.Fatalf("the caller was not told: %q", errb.String())
	}
	rs := verifyRun(t, h, r.Dir)
	if err := hosttest.Verify(t, h.Key.Public(), r.Dir); err != nil {
		t.Fatalf("a bounded run does not verify: %v", err)
	}
	noted := false
	for _, res := range rs {
		noted = noted || res.Kind == verify.KindOutput && strings.Contains(res.Note, "3145728") && strings.Contains(res.Note, "dropped")
	}
	if !noted {
		t.Fatal("the verifier does not say what was dropped")
	}
	// The whole stream in its place, a longer prefix, another prefix: refused.
	for name, c := range map[string]struct {
		b    []byte
		code reject.Code
	}{
		"the whole stream": {blob, reject.Extended},
		"shorter":          {blob[:bound-1], reject.Truncated},
		"other bytes":      {append([]byte{blob[0] ^ 1}, blob[1:bound]...), reject.Address},
	} {
		os.WriteFile(filepath.Join(r.Dir, host.FileStdout), c.b, 0o644)
		if err := hosttest.Verify(t, h.Key.Public(), r.Dir); !errors.Is(err, c.code) {
			t.Errorf("%s: %v, want %s", name, err, c.code)
		}
	}
	os.WriteFile(filepath.Join(r.Dir, host.FileStdout), stored, 0o644)
	// Under the bound, nothing is cut, and the outcome is the seven-item one.
	r2, small := execIn(t, h, info.ID, "echo", "hi")
	if small != "hi\n" {
		t.Fatal(small)
	}
	jb, _ = os.ReadFile(filepath.Join(r2.Dir, verify.FileJournal))
	entries, _, _ = journal.Parse(jb)
	if o, err := journal.LastOutcome(entries); err != nil || o.Cut() || entries[len(entries)-1].Resp[0] != 0x87 {
		t.Fatalf("an uncut outcome: %+v %v", o, err)
	}
}

// diskUse is what du counts under each path: the blocks allocated to
// every file and directory, in bytes (a path that is gone counts 0).
func diskUse(t *testing.T, paths ...string) int64 {
	t.Helper()
	var n int64
	for _, p := range paths {
		filepath.WalkDir(p, func(_ string, d os.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				}
			}
			return nil
		})
	}
	return n
}

// TestSuspensionDoesNotDoubleTheWorkspace: suspending a workspace of N
// bytes stores it once (its chunks, by content address), and keeps no
// second copy of it beside them; suspending it again unchanged, after a
// resumption, adds nothing. Measured as du measures, over the state
// directory and everything the host keeps beside it for the sandbox.
func TestSuspensionDoesNotDoubleTheWorkspace(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	const size = 32 << 20
	blob := make([]byte, size)
	rand.Read(blob)
	if err := os.WriteFile(filepath.Join(info.Workspace, "data"), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	use := func() int64 { return diskUse(t, h.Store.Root(), h.parkedDir(info.ID), info.Workspace) }
	live := use()
	if _, err := h.Suspend(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	suspended := use()
	t.Logf("du: live %d KiB, suspended %d KiB (a workspace of %d KiB)", live>>10, suspended>>10, size>>10)
	if out, err := exec.Command("du", "-sck", h.Store.Root(), h.parkedDir(info.ID)).CombinedOutput(); err == nil || len(out) > 0 {
		t.Logf("du -sck, suspended:\n%s", out)
	}
	if suspended > live+size/4 {
		t.Fatalf("suspended, the sandbox takes %d bytes on disk; live, %d: its %d-byte workspace is kept twice", suspended, live, size)
	}
	if _, err := os.Stat(h.parkedDir(info.ID)); !os.IsNotExist(err) {
		t.Fatalf("a copy of the workspace is kept beside its snapshot: %v", err)
	}
	// Resumed, it is whole; suspended again unchanged, nothing is added.
	in, err := h.Resume(ctx, info.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(in.Workspace, "data")); err != nil || !bytes.Equal(b, blob) {
		t.Fatalf("resumed: %d bytes, %v", len(b), err)
	}
	if _, err := h.Suspend(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	again := diskUse(t, h.Store.Root(), h.parkedDir(info.ID), in.Workspace)
	t.Logf("du: suspended again unchanged %d KiB", again>>10)
	if again > suspended+size/4 {
		t.Fatalf("a second suspension of the unchanged workspace took %d bytes more", again-suspended)
	}
	if p, err := h.readParked(info.ID); err != nil || p.Retained > size+size/4 {
		t.Fatalf("the parked interval is priced for %d bytes retained (%v)", p.Retained, err)
	}
}

// TestWorkspaceBoundHoldsWhileItIsWritten: a live sandbox's workspace is
// bounded as it is written, not checked afterwards. At S1 an exec that
// writes past the bound gets ENOSPC at the write; its unit records the
// bound, its attestation says the workspace is at it, and the run
// verifies; the workspace never holds more than the bound on disk, and a
// later exec that frees space can write again. At S2 a module's write
// past it gets ENOSPC alike (the same filesystem under the host's calls).
// A bound under the least a workspace is made with is refused, and the
// host's default bound applies where the spec sets none.
func TestWorkspaceBoundHoldsWhileItIsWritten(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	if err := volume.Probe(); err != nil {
		t.Skipf("this host cannot make a bounded workspace: %v", err)
	}
	ctx := context.Background()
	const bound = 32 << 20
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t), Limits: unit.Limits{WorkspaceBytes: bound}})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	r, err := h.Exec(ctx, info.ID, "", ExecRequest{Args: []string{"sh", "-c", "dd if=/dev/zero of=big bs=1M count=64 status=none; echo dd=$?"}, Stdout: &out, Stderr: &errb, Deadline: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "dd=1\n" || !strings.Contains(errb.String(), "No space left on device") {
		t.Fatalf("a writer past the bound: %q %q", out.String(), errb.String())
	}
	if fi, err := os.Stat(filepath.Join(info.Workspace, "big")); err != nil || fi.Size() > bound {
		t.Fatalf("the workspace holds %d bytes under a bound of %d (%v)", fi.Size(), bound, err)
	}
	if use := diskUse(t, volume.Image(info.Workspace)); use > bound+bound/8 {
		t.Fatalf("the workspace's filesystem takes %d bytes of the host's disk under a bound of %d", use, bound)
	}
	found := false
	for _, n := range r.Attestation.Claim.Notes {
		found = found || strings.Contains(n, "workspace is at its bound") && strings.Contains(n, "ENOSPC")
	}
	if !found {
		t.Fatalf("the exec's attestation does not say the workspace is at its bound: %q", r.Attestation.Claim.Notes)
	}
	if ub, err := os.ReadFile(filepath.Join(r.Dir, "unit.json")); err != nil || !strings.Contains(string(ub), `"workspace_bytes":33554432`) {
		t.Fatalf("the unit does not record the bound: %s %v", ub, err)
	}
	if err := hosttest.Verify(t, h.Key.Public(), r.Dir); err != nil {
		t.Fatal(err)
	}
	// Freed, it takes writes again; a note only when it is at its bound.
	r2, o2 := execIn(t, h, info.ID, "sh", "-c", "rm big && dd if=/dev/zero of=small bs=1M count=4 status=none && echo ok")
	if o2 != "ok\n" {
		t.Fatalf("after freeing: %q", o2)
	}
	for _, n := range r2.Attestation.Claim.Notes {
		if strings.Contains(n, "at its bound") {
			t.Fatalf("a note on a workspace under its bound: %q", n)
		}
	}
	// S2: a module's write past the bound.
	s2, err := h.Create(ctx, SandboxSpec{Tier: tier.S2, Grants: grants(t), Limits: unit.Limits{WorkspaceBytes: volume.MinSize}})
	if err != nil {
		t.Fatal(err)
	}
	fill, err := os.Create(filepath.Join(s2.Workspace, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	for werr == nil {
		_, werr = fill.Write(make([]byte, 64<<10))
	}
	fill.Close()
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("the host filling the S2 workspace: %v", werr)
	}
	fi, _ := os.Stat(filepath.Join(s2.Workspace, "fill"))
	os.Truncate(filepath.Join(s2.Workspace, "fill"), fi.Size()-256<<10) // room for a little, not for 1 MiB
	mod := filepath.Join(t.TempDir(), "fsops.wasm")
	os.WriteFile(mod, image(t, "fsops"), 0o644)
	// wazero has no ENOSPC errno for the guest: the module's write past
	// the bound fails as an I/O error (EIO), at the write all the same.
	r3, o := execIn(t, h, s2.ID, mod, "write", filepath.Join(s2.Workspace, "small"), "fits", "append", filepath.Join(s2.Workspace, "more"), strings.Repeat("x", 1<<20))
	if !strings.Contains(o, "write "+filepath.Join(s2.Workspace, "small")+": ok") || !strings.Contains(o, "append "+filepath.Join(s2.Workspace, "more")+": ERROR") {
		t.Fatalf("an S2 module past the bound: %q", o)
	}
	if fi, err := os.Stat(filepath.Join(s2.Workspace, "more")); err == nil && fi.Size() >= 1<<20 {
		t.Fatalf("an S2 module wrote %d bytes past the bound", fi.Size())
	}
	found = false
	for _, n := range r3.Attestation.Claim.Notes {
		found = found || strings.Contains(n, "workspace is at its bound")
	}
	if !found {
		t.Fatalf("the S2 exec's attestation does not say the workspace is at its bound: %q", r3.Attestation.Claim.Notes)
	}
	// Refused: a bound under the least; the host's default applies.
	if _, err := h.Create(ctx, SandboxSpec{Grants: grants(t), Limits: unit.Limits{WorkspaceBytes: 1 << 20}}); err == nil {
		t.Fatal("a workspace bound of 1 MiB was made")
	}
	h.WorkspaceMax = 48 << 20
	def, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	// The bound is the filesystem's size, its own metadata (journal,
	// inode tables) included: a few percent at GiB sizes, more here.
	if u, ok, err := volume.Of(def.Workspace); err != nil || !ok || u.Size > 48<<20 || u.Size < 32<<20 {
		t.Fatalf("the host's default bound: %+v %v %v", u, ok, err)
	}
}
