package host

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/verify"
)

// TestExecOutputIsBoundedInTheRecord: an exec that prints more than the
// host's output bound streams every byte to its caller, while its record
// keeps only the bound's prefix of the stream; the journal's outcome
// names the whole stream (length, BLAKE3) and the prefix kept, the
// attestation's notes say what was dropped, the run verifies, and a file
// that is not the kept prefix does not.
func TestExecOutputIsBoundedInTheRecord(t *testing.T) {
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
	stored, err := os.ReadFile(filepath.Join(r.Dir, FileStdout))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, blob[:bound]) {
		t.Fatalf("stdout.log holds %d bytes, want the first %d written", len(stored), bound)
	}
	if b, _ := os.ReadFile(filepath.Join(r.Dir, FileStderr)); string(b) != "done\n" {
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
	if err := firstErr(rs); err != nil {
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
		os.WriteFile(filepath.Join(r.Dir, FileStdout), c.b, 0o644)
		if err := firstErr(verifyRun(t, h, r.Dir)); !errors.Is(err, c.code) {
			t.Errorf("%s: %v, want %s", name, err, c.code)
		}
	}
	os.WriteFile(filepath.Join(r.Dir, FileStdout), stored, 0o644)
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
