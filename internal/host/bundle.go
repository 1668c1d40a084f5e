package host

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/canon"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/tree"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/reject"
)

// A bundle carries a durable run to another host (seed 000: the record
// is the run): a tar stream of bundle.json, the record, the note of a
// parked one, every object the record names (its unit and grants, each
// snapshot's tree, chunks and environment manifest) and every run it
// names, whole. Import takes nothing on trust: every blob must hash to
// its name, every run's attestation to its directory's name (under a
// valid signature; whose key is trusted is the verifier's business),
// and the record must verify from its genesis; only then is anything
// put in place.

// BundleType is bundle.json's "bundle".
const BundleType = "sandbox.bundle/1"

// BundleManifest is a bundle's first entry.
type BundleManifest struct {
	Bundle  string     `json:"bundle"`  // BundleType
	Sandbox string     `json:"sandbox"` // whose record
	Head    addr.Addr  `json:"head"`    // the record's head when exported
	Signer  key.Public `json:"signer"`  // the exporting host's key, for people: trust is the verifier's
}

// Bounds on what an import reads.
const (
	MaxBundleFile    = 256 << 20
	MaxBundleEntries = 1 << 20
)

var (
	sandboxID = regexp.MustCompile(`^sb-[0-9a-f]{12}$`)
	blobName  = regexp.MustCompile(`^blobs/([0-9a-f]{64})$`)
	runName   = regexp.MustCompile(`^runs/([0-9a-f]{64})/([a-z]+\.[a-z]+)$`)
)

// Export writes sandbox id's durable run to w as a bundle. Only a
// suspended or closed sandbox is exported: a live one's workspace is
// not kept.
func (h *Host) Export(id string, w io.Writer) error {
	if !sandboxID.MatchString(id) {
		return fmt.Errorf("%w: %q is not a sandbox id", ErrNoSandbox, id)
	}
	rb, err := os.ReadFile(h.RecordPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %q (no record of it here)", ErrNoSandbox, id)
	}
	if err != nil {
		return err
	}
	entries, torn, err := chain.Split(rb)
	if err != nil {
		return err
	}
	rb = rb[:len(rb)-torn]
	st, err := record.Verify(entries)
	if err != nil {
		return fmt.Errorf("%s: %w", h.RecordPath(id), err)
	}
	if st.Phase == record.Active {
		return &InvalidError{Err: fmt.Errorf("sandbox %s is live: suspend it (or close it) before it is exported", id)}
	}
	blobs := map[addr.Addr]bool{st.Header.Unit: true, st.Header.Grants: true}
	var runs []addr.Addr
	for _, e := range entries[1:] {
		seg, err := record.ParseSegment(e)
		if err != nil {
			return err
		}
		switch seg.Kind {
		case record.Executed:
			runs = append(runs, seg.Attestation)
		case record.Suspended:
			blobs[seg.Snapshot.Manifest] = true
			if seg.Snapshot.Memory != nil {
				blobs[*seg.Snapshot.Memory] = true
			}
			t, err := tree.Load(h.Store, seg.Snapshot.Root)
			if err != nil {
				return err
			}
			blobs[seg.Snapshot.Root] = true
			for _, e := range t.Entries {
				for _, c := range e.Chunks {
					blobs[c] = true
				}
			}
		}
	}
	tw := tar.NewWriter(w)
	put := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(b)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	mb, err := canon.Marshal(BundleManifest{Bundle: BundleType, Sandbox: id, Head: st.Head, Signer: h.Key.Public()})
	if err != nil {
		return err
	}
	if err := put("bundle.json", mb); err != nil {
		return err
	}
	if err := put("records/"+id+".jsonl", rb); err != nil {
		return err
	}
	if b, err := os.ReadFile(h.Store.Path("records", id+".json")); err == nil {
		if err := put("records/"+id+".json", b); err != nil {
			return err
		}
	}
	names := make([]addr.Addr, 0, len(blobs))
	for a := range blobs {
		names = append(names, a)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].Hex() < names[j].Hex() })
	for _, a := range names {
		b, err := h.Store.Blob(a)
		if err != nil {
			return err
		}
		if err := put("blobs/"+a.Hex(), b); err != nil {
			return err
		}
	}
	for _, a := range runs {
		dir := h.Store.Path("runs", a.Hex())
		ents, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("run %s, which the record names: %w", a, err)
		}
		for _, e := range ents {
			if !e.Type().IsRegular() {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return err
			}
			if err := put("runs/"+a.Hex()+"/"+e.Name(), b); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// Imported says what an import put in place.
type Imported struct {
	Sandbox      string
	Head         addr.Addr
	Phase        record.Phase
	Blobs, Runs  int
	Signer       key.Public // the exporting host's, as the bundle says
	ReplacedPrev bool       // an older copy of the record was extended
}

// Import reads a bundle from r and puts the durable run it carries in
// this state directory, as owner's: checked whole first, then placed. A
// record already here is replaced only by one that extends it.
func (h *Host) Import(r io.Reader, owner string) (Imported, error) {
	var im Imported
	b, err := readBundle(r)
	if err != nil {
		return im, err
	}
	im.Sandbox, im.Head, im.Signer = b.manifest.Sandbox, b.manifest.Head, b.manifest.Signer
	st, err := record.VerifyBytes(b.record)
	if err != nil {
		return im, fmt.Errorf("bundle: the record: %w", err)
	}
	if st.Head != b.manifest.Head {
		return im, reject.New(reject.HeadMismatch, "bundle.json", "the record's head is %s, the bundle says %s", st.Head, b.manifest.Head)
	}
	if st.Phase == record.Active {
		return im, reject.New(reject.Phase, "bundle", "an active record: only a suspended or closed sandbox travels")
	}
	im.Phase = st.Phase
	// Every object the record names is in the bundle or already here.
	for _, a := range []addr.Addr{st.Header.Unit, st.Header.Grants} {
		if _, ok := b.blobs[a]; !ok && !h.Store.HasBlob(a) {
			return im, reject.New(reject.Missing, "bundle", "blob %s, which the record's genesis names", a)
		}
	}
	if st.Last != nil && st.Phase == record.Parked {
		if _, ok := b.blobs[st.Last.Root]; !ok && !h.Store.HasBlob(st.Last.Root) {
			return im, reject.New(reject.Missing, "bundle", "the suspended workspace's tree %s", st.Last.Root)
		}
	}
	entries, _, _ := chain.Split(b.record)
	for i, e := range entries[1:] {
		if seg, _ := record.ParseSegment(e); seg.Kind == record.Executed {
			if _, ok := b.runs[seg.Attestation]; !ok {
				if _, err := os.Stat(h.Store.Path("runs", seg.Attestation.Hex())); err != nil {
					return im, reject.New(reject.Missing, fmt.Sprintf("bundle: record line %d", i+2), "run %s, which the record names", seg.Attestation)
				}
			}
		}
	}
	// The record here, if any, must be a prefix of the one imported.
	path := h.RecordPath(b.manifest.Sandbox)
	if cur, err := os.ReadFile(path); err == nil {
		switch {
		case bytes.Equal(cur, b.record):
		case bytes.HasPrefix(b.record, cur):
			im.ReplacedPrev = true
		default:
			return im, reject.New(reject.Splice, path, "a different record of %s is here already: it is not a prefix of the one imported", b.manifest.Sandbox)
		}
	}
	// Place: blobs, runs, then the record (what names them) last.
	for a, data := range b.blobs {
		if !h.Store.HasBlob(a) {
			if err := h.Store.PutBlob(a, data); err != nil {
				return im, err
			}
			im.Blobs++
		}
	}
	for a, files := range b.runs {
		dir := h.Store.Path("runs", a.Hex())
		if _, err := os.Stat(dir); err == nil {
			continue
		}
		if err := placeRun(h.Store.Path("runs"), a, files); err != nil {
			return im, err
		}
		im.Runs++
	}
	if err := os.MkdirAll(h.Store.Path("records"), 0o700); err != nil {
		return im, err
	}
	if b.parked != nil && st.Phase == record.Parked {
		var p parked
		if err := decodeParked(b.parked, &p); err != nil {
			return im, err
		}
		p.Owner = owner
		if err := h.writeParked(b.manifest.Sandbox, p); err != nil {
			return im, err
		}
	}
	if err := safefile.Write(path, b.record, 0o600); err != nil {
		return im, err
	}
	return im, nil
}

// placeRun writes a run directory under a temporary name, fsynced, and
// renames it into place.
func placeRun(runs string, a addr.Addr, files map[string][]byte) error {
	if err := os.MkdirAll(runs, 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(runs, ".import-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for name, data := range files {
		if err := safefile.Write(filepath.Join(tmp, name), data, 0o644); err != nil {
			return err
		}
	}
	if err := safefile.SyncDir(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(runs, a.Hex())); err != nil {
		return err
	}
	return safefile.SyncDir(runs)
}

func decodeParked(b []byte, p *parked) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		return reject.Wrap(reject.Invalid, "records/ID.json", err)
	}
	if p.Retained < 0 {
		return reject.New(reject.Invalid, "records/ID.json", "retained bytes below zero")
	}
	return nil
}

// bundle is a bundle read and checked by address.
type bundle struct {
	manifest BundleManifest
	record   []byte
	parked   []byte
	blobs    map[addr.Addr][]byte
	runs     map[addr.Addr]map[string][]byte
}

// readBundle reads a bundle's entries, checking each name and bound, and
// every blob's and run's address. It reads hostile bytes: no entry is
// written anywhere by it.
func readBundle(r io.Reader) (*bundle, error) {
	b := &bundle{blobs: map[addr.Addr][]byte{}, runs: map[addr.Addr]map[string][]byte{}}
	tr := tar.NewReader(r)
	n := 0
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, reject.Wrap(reject.Malformed, "bundle", err)
		}
		if n++; n > MaxBundleEntries {
			return nil, reject.New(reject.Invalid, "bundle", "more than %d entries", MaxBundleEntries)
		}
		name := hd.Name
		where := "bundle: " + name
		if hd.Typeflag != tar.TypeReg || path.Clean(name) != name || hd.Size < 0 || hd.Size > MaxBundleFile {
			return nil, reject.New(reject.Invalid, where, "only regular files under their clean names, at most %d bytes", MaxBundleFile)
		}
		data, err := io.ReadAll(io.LimitReader(tr, hd.Size+1))
		if err != nil {
			return nil, reject.Wrap(reject.Truncated, where, err)
		}
		if int64(len(data)) != hd.Size {
			return nil, reject.New(reject.Truncated, where, "%d bytes of %d", len(data), hd.Size)
		}
		switch {
		case n == 1 && name != "bundle.json":
			return nil, reject.New(reject.Unrecognised, where, "a bundle begins with bundle.json")
		case name == "bundle.json":
			if n != 1 {
				return nil, reject.New(reject.Invalid, where, "bundle.json twice")
			}
			if err := canon.Unmarshal(data, &b.manifest); err != nil {
				return nil, fmt.Errorf("bundle.json: %w", err)
			}
			if b.manifest.Bundle != BundleType {
				return nil, reject.New(reject.Unrecognised, "bundle.json", "%q, want %q", b.manifest.Bundle, BundleType)
			}
			if !sandboxID.MatchString(b.manifest.Sandbox) {
				return nil, reject.New(reject.Invalid, "bundle.json", "sandbox %q is not a sandbox id", b.manifest.Sandbox)
			}
		case name == "records/"+b.manifest.Sandbox+".jsonl" && b.record == nil:
			b.record = data
		case name == "records/"+b.manifest.Sandbox+".json" && b.parked == nil:
			b.parked = data
		case blobName.MatchString(name):
			a, _ := addr.Parse("b3:" + blobName.FindStringSubmatch(name)[1])
			if addr.Of(data) != a {
				return nil, reject.New(reject.Address, where, "its bytes hash to %s", addr.Of(data))
			}
			b.blobs[a] = data
		case runName.MatchString(name):
			m := runName.FindStringSubmatch(name)
			a, _ := addr.Parse("b3:" + m[1])
			if b.runs[a] == nil {
				b.runs[a] = map[string][]byte{}
			}
			if _, dup := b.runs[a][m[2]]; dup {
				return nil, reject.New(reject.Invalid, where, "twice")
			}
			b.runs[a][m[2]] = data
		default:
			return nil, reject.New(reject.Invalid, where, "not an entry a bundle has")
		}
	}
	if b.record == nil {
		return nil, reject.New(reject.Missing, "bundle", "no record")
	}
	// A run's attestation must be the one its directory is named by,
	// under a valid signature (by whichever key: trust is the verifier's).
	for a, files := range b.runs {
		env, ok := files["attestation.json"]
		if !ok {
			return nil, reject.New(reject.Missing, "bundle: runs/"+a.Hex(), "no attestation.json")
		}
		at, err := attest.Verify(env, key.Trust{})
		if at == nil {
			return nil, fmt.Errorf("bundle: runs/%s: %w", a.Hex(), err)
		}
		if at.Addr != a {
			return nil, reject.New(reject.Address, "bundle: runs/"+a.Hex(), "its attestation is %s", at.Addr)
		}
	}
	return b, nil
}
