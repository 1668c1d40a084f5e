package live

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/reject"
)

// tarEntries reads a bundle's entries, in order.
func tarEntries(t *testing.T, b []byte) (names []string, files map[string][]byte) {
	t.Helper()
	files = map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names, files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		names = append(names, hd.Name)
		files[hd.Name] = data
	}
}

// tarOf writes entries as a bundle.
func tarOf(t *testing.T, names []string, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		b := files[n]
		tw.WriteHeader(&tar.Header{Name: n, Mode: 0o600, Size: int64(len(b)), Typeflag: tar.TypeReg, Format: tar.FormatPAX})
		tw.Write(b)
	}
	tw.Close()
	return buf.Bytes()
}

// A bundle carries evidence, never authority (issue 26): entries are
// sealed by the host that appended them and import trusts only keys it
// is given; a rewritten genesis, a forger's seals, an extension of a
// record here without its seals, a missing object, a note that would
// price the parked interval, and grants the importer may not give are
// each refused, and nothing is placed.
func TestBundleCarriesEvidenceNotAuthority(t *testing.T) {
	t.Parallel()
	a, b := newS1Host(t), newS1Host(t)
	ctx := context.Background()
	hostDir := t.TempDir()
	info, err := a.Create(ctx, SandboxSpec{Grants: grants(t, "fs:"+hostDir+":ro")})
	if err != nil {
		t.Fatal(err)
	}
	execIn(t, a, info.ID, "sh", "-c", "echo from A > a.txt")
	if _, err := a.Suspend(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := a.Export(info.ID, &buf); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	names, files := tarEntries(t, raw)
	recName, sealName := "records/"+info.ID+".jsonl", "records/"+info.ID+".seals"
	if files[sealName] == nil {
		t.Fatalf("the bundle carries no seals: %v", names)
	}
	trustA := key.NewTrust(a.Key.Public())
	placed := func(h *Manager) bool {
		_, err := os.Stat(h.RecordPath(info.ID))
		return err == nil
	}

	// Without A's key trusted: refused, nothing placed.
	if _, err := b.Import(ctx, bytes.NewReader(raw), host.LocalOwner, key.Trust{}); !errors.Is(err, reject.UntrustedKey) || placed(b) {
		t.Fatalf("an untrusted sealer: %v", err)
	}

	// A genesis rewritten to name another grant set (a host directory
	// read-write), that grant set's blob added and bundle.json's head
	// fixed: its seals no longer fit, and new ones need A's key.
	wide := grants(t, "fs:/etc:rw")
	wb, wa, _ := wide.Canonical()
	entries, _, _ := chain.Split(files[recName])
	st, _ := record.Verify(entries)
	forged := bytes.Replace(files[recName], []byte(st.Header.Grants.String()), []byte(wa.String()), 1)
	fentries, _, _ := chain.Split(forged)
	fst, err := record.Verify(fentries)
	if err != nil {
		t.Fatal(err)
	}
	rewrite := func(rec, seals []byte, extra map[string][]byte) []byte {
		fs := map[string][]byte{}
		for k, v := range files {
			fs[k] = v
		}
		ns := append([]string{}, names...)
		var m BundleManifest
		if err := jcs.Unmarshal(fs["bundle.json"], &m); err != nil {
			t.Fatal(err)
		}
		rs, _ := record.VerifyBytes(rec)
		m.Head = rs.Head
		fs["bundle.json"] = mustCanon(t, m)
		fs[recName], fs[sealName] = rec, seals
		for k, v := range extra {
			fs[k] = v
			ns = append(ns, k)
		}
		return tarOf(t, ns, fs)
	}
	wideBlob := map[string][]byte{"blobs/" + wa.Hex(): wb}
	if _, err := b.Import(ctx, bytes.NewReader(rewrite(forged, files[sealName], wideBlob)), host.LocalOwner, trustA); !errors.Is(err, reject.HeadMismatch) || placed(b) {
		t.Fatalf("a rewritten genesis under A's seals: %v", err)
	}
	// Sealed anew by the forger's own key: not one B trusts.
	forger, _ := key.Generate(rand.Reader)
	heads, _, _ := record.Heads(fentries)
	var fseals []byte
	for i, h := range heads {
		l, _ := record.NewSeal(forger, info.ID, i+1, h).Bytes()
		fseals = append(append(fseals, l...), '\n')
	}
	_ = fst
	if _, err := b.Import(ctx, bytes.NewReader(rewrite(forged, fseals, wideBlob)), host.LocalOwner, trustA); !errors.Is(err, reject.UntrustedKey) || placed(b) {
		t.Fatalf("a rewritten genesis under a forger's seals: %v", err)
	}
	// A bundle/1 (no seals), and a bundle that drops them.
	noSeals := []string{}
	for _, n := range names {
		if n != sealName {
			noSeals = append(noSeals, n)
		}
	}
	if _, err := b.Import(ctx, bytes.NewReader(tarOf(t, noSeals, files)), host.LocalOwner, trustA); !errors.Is(err, reject.Missing) || placed(b) {
		t.Fatalf("a bundle without seals: %v", err)
	}
	// A note beside the record (records/ID.json, unsigned) is no entry a
	// bundle has: it cannot price the parked interval.
	note := map[string][]byte{"records/" + info.ID + ".json": []byte(`{"owner":"local","suspended":"2000-01-01T00:00:00Z","retained_bytes":999999999999999}`)}
	if _, err := b.Import(ctx, bytes.NewReader(rewrite(files[recName], files[sealName], note)), host.LocalOwner, trustA); !errors.Is(err, reject.Invalid) || placed(b) {
		t.Fatalf("a bundle with a note: %v", err)
	}
	// Every object the record names: a chunk dropped is refused by name.
	var chunk string
	for _, n := range names {
		if strings.HasPrefix(n, "blobs/") && bytes.Contains(files[n], []byte("from A")) {
			chunk = n
		}
	}
	var less []string
	for _, n := range names {
		if n != chunk {
			less = append(less, n)
		}
	}
	if _, err := b.Import(ctx, bytes.NewReader(tarOf(t, less, files)), host.LocalOwner, trustA); !errors.Is(err, reject.Missing) || !strings.Contains(err.Error(), strings.TrimPrefix(chunk, "blobs/")) || placed(b) {
		t.Fatalf("a bundle without a chunk the record names (%s): %v", chunk, err)
	}
	// The grants its genesis binds must be the importer's to give: a
	// token's default policy does not give a host directory.
	if _, err := b.Import(ctx, bytes.NewReader(raw), "token:0123456789abcdef", trustA); !errors.Is(err, grant.ErrDenied) || placed(b) {
		t.Fatalf("an importer who may not give its grants: %v", err)
	}
	if ds, _, _ := authority.ReadLog(b.Store.Path(host.AuthorityLog)); len(ds) == 0 || ds[len(ds)-1].Action != "import" {
		t.Fatalf("the refused import is not in the decision log: %+v", ds)
	}

	// Trusted and within the importer's authority: placed. The parked
	// interval's price comes from what B retains, counted by B.
	im, err := b.Import(ctx, bytes.NewReader(raw), host.LocalOwner, trustA)
	if err != nil || len(im.Sealers) != 1 || im.Sealers[0] != a.Key.Public() {
		t.Fatalf("import: %+v %v", im, err)
	}
	p, err := b.readParked(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	bst, _ := record.VerifyBytes(files[recName])
	want, _ := retainedBytes(b.Store, *bst.Last)
	if p.Retained != want || p.Owner != host.LocalOwner {
		t.Fatalf("the note here: %+v; want %d bytes retained", p, want)
	}
	// Shown with its genesis grants, from the grant set itself.
	sus := b.Suspended(host.LocalOwner)
	if len(sus) != 1 || !strings.Contains(strings.Join(sus[0].GrantArgs, " "), "fs:"+hostDir+":ro") {
		t.Fatalf("suspended: %+v", sus)
	}

	// A record here, extended by a bundle: its new entries sealed by a
	// key B does not trust are refused; the prefix must carry B's seals.
	if _, err := b.Resume(ctx, info.ID, host.LocalOwner); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Suspend(ctx, info.ID, host.LocalOwner); err != nil {
		t.Fatal(err)
	}
	var buf2 bytes.Buffer
	if err := b.Export(info.ID, &buf2); err != nil {
		t.Fatal(err)
	}
	n2, f2 := tarEntries(t, buf2.Bytes())
	rec2 := f2[recName]
	e2, _, _ := chain.Split(rec2)
	h2, _, _ := record.Heads(e2)
	// The attacker appends a resumption and a suspension naming another
	// snapshot, and seals the new entries (and, to pass, the whole
	// prefix) with its own key.
	s2, _ := record.VerifyBytes(rec2)
	other := record.Snapshot{Root: addr.Of([]byte("another sandbox's tree")), Manifest: s2.Last.Manifest}
	l1, _ := record.Segment{Kind: record.Resumed, Snapshot: *s2.Last, IdleProvenance: "Estimator x"}.Bytes()
	l2, _ := record.Segment{Kind: record.Suspended, Snapshot: other}.Bytes()
	ext := append(append(append(append(append([]byte{}, rec2...), l1...), '\n'), l2...), '\n')
	ee, _, _ := chain.Split(ext)
	eh, _, _ := record.Heads(ee)
	var extSeals []byte
	for i, h := range eh {
		l, _ := record.NewSeal(forger, info.ID, i+1, h).Bytes()
		extSeals = append(append(extSeals, l...), '\n')
	}
	_ = h2
	files, names = f2, n2
	if _, err := a.Import(ctx, bytes.NewReader(rewrite(ext, extSeals, nil)), host.LocalOwner, key.NewTrust(b.Key.Public(), forger.Public())); !errors.Is(err, reject.Splice) {
		t.Fatalf("an extension whose prefix is not sealed as here: %v", err)
	}
	// B's own seals on the prefix, the forger's on the rest: untrusted.
	bseals, _, _ := chain.Split(f2[sealName])
	mixed := []byte{}
	for _, l := range bseals {
		mixed = append(append(mixed, l...), '\n')
	}
	for i := len(bseals); i < len(eh); i++ {
		l, _ := record.NewSeal(forger, info.ID, i+1, eh[i]).Bytes()
		mixed = append(append(mixed, l...), '\n')
	}
	before, _ := os.ReadFile(a.RecordPath(info.ID))
	if _, err := a.Import(ctx, bytes.NewReader(rewrite(ext, mixed, map[string][]byte{"blobs/" + other.Root.Hex(): []byte("x")})), host.LocalOwner, key.NewTrust(b.Key.Public())); err == nil {
		t.Fatal("an extension sealed by an untrusted key was taken")
	}
	if after, _ := os.ReadFile(a.RecordPath(info.ID)); !bytes.Equal(before, after) {
		t.Fatal("a refused bundle changed the record here")
	}
	// B's real export of its extension, with B trusted: taken by A.
	if im, err := a.Import(ctx, bytes.NewReader(buf2.Bytes()), host.LocalOwner, key.NewTrust(b.Key.Public())); err != nil || !im.ReplacedPrev {
		t.Fatalf("B's extension: %+v %v", im, err)
	}
}

// The seals of a live sandbox's record are written as it goes, by this
// host, and a record kept before seals were is sealed when opened.
func TestRecordsAreSealedAsAppended(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	execIn(t, h, info.ID, "true")
	if _, err := h.Suspend(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	entries, _, _ := chain.Read(h.RecordPath(info.ID))
	seals, _ := record.ReadSeals(h.RecordPath(info.ID))
	if _, err := record.CheckSeals(info.ID, entries, seals, key.NewTrust(h.Key.Public()).Trusts); err != nil || len(entries) != 3 {
		t.Fatalf("%d entries: %v", len(entries), err)
	}
	// A crash left junk where entry 2's seal was, entry 3's kept: the
	// export seals them again before anything leaves the host.
	junk := append(append(append([]byte{}, seals[0]...), "\n\x00\x00\n\n"...), append(seals[2], '\n')...)
	os.WriteFile(record.SealPath(h.RecordPath(info.ID)), junk, 0o600)
	if err := h.Export(info.ID, io.Discard); err != nil {
		t.Fatalf("an export with junk among its seals: %v", err)
	}
	seals, _ = record.ReadSeals(h.RecordPath(info.ID))
	if _, err := record.CheckSeals(info.ID, entries, seals, key.NewTrust(h.Key.Public()).Trusts); err != nil {
		t.Fatalf("after the export: %v", err)
	}
	os.Remove(record.SealPath(h.RecordPath(info.ID)))
	if _, err := h.Resume(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	h.Remove(info.ID, "")
	entries, _, _ = chain.Read(h.RecordPath(info.ID))
	seals, _ = record.ReadSeals(h.RecordPath(info.ID))
	if _, err := record.CheckSeals(info.ID, entries, seals, key.NewTrust(h.Key.Public()).Trusts); err != nil {
		t.Fatalf("after a record without seals was opened: %v", err)
	}
}

func mustCanon(t *testing.T, v any) []byte {
	t.Helper()
	b, err := jcs.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
