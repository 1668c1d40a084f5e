package host

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
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
