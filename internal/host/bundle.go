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

	"github.com/zeebo/blake3"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/canon"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/tree"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// A bundle carries a durable run to another host (seed 000: the record
// is the run): a tar stream of bundle.json, the record, the note of a
// parked one, every object the record names (its unit and grants, each
// snapshot's tree, chunks and environment manifest) and every run it
// names, whole. Import takes nothing on trust: every blob must hash to
// its name, every run's attestation to its directory's name (under a
// valid signature; whose key is trusted is the verifier's business),
// the record must verify from its genesis, and every object it names
// must be in the bundle or here already (checkNamed); only then is
// anything put in place.

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
			if m := seg.Snapshot.Memory; m != nil {
				blobs[*m] = true
				park, err := h.loadPark(*m)
				if err != nil {
					return err
				}
				objs, err := park.objects(h.Store)
				if err != nil {
					return err
				}
				for _, a := range objs {
					blobs[a] = true
				}
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
	var err error
	// The bundle's objects are staged on disk as they are read and
	// checked (a bundle may be as large as a workspace), in runs/, where
	// gc finds one a killed import left.
	runs := h.Store.Path("runs")
	if err := os.MkdirAll(runs, 0o700); err != nil {
		return im, err
	}
	var stage string
	if namer := h.Store.Namer(); namer != nil {
		stage, err = state.MkdirNamed(runs, ".partial-import", namer)
	} else {
		stage, err = os.MkdirTemp(runs, ".partial-import-")
	}
	if err != nil {
		return im, err
	}
	defer os.RemoveAll(stage)
	b, err := readBundle(r, stage)
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
	if err := h.checkNamed(b, st); err != nil {
		return im, err
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
	// Place: blobs, runs, then the record (what names them) last. Each
	// staged file was fsynced; a rename puts it in place.
	blobs := h.Store.Path("blobs")
	if err := os.MkdirAll(blobs, 0o700); err != nil {
		return im, err
	}
	for a, staged := range b.blobs {
		if !h.Store.HasBlob(a) {
			if err := os.Rename(staged, filepath.Join(blobs, a.Hex())); err != nil {
				return im, err
			}
			im.Blobs++
		}
	}
	if err := safefile.SyncDir(blobs); err != nil {
		return im, err
	}
	for a := range b.runs {
		dir := h.Store.Path("runs", a.Hex())
		if _, err := os.Stat(dir); err == nil {
			continue
		}
		staged := filepath.Join(stage, "runs", a.Hex())
		if err := safefile.SyncDir(staged); err != nil {
			return im, err
		}
		row := store.RowOf(staged, a)
		h.Store.IndexBefore(row)
		if err := os.Rename(staged, dir); err != nil {
			return im, err
		}
		h.Store.IndexAfter(row)
		im.Runs++
	}
	if err := safefile.SyncDir(runs); err != nil {
		return im, err
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
	if h.Store.Index != nil {
		r := store.IndexedRecord{ID: b.manifest.Sandbox, Phase: string(st.Phase), Head: st.Head, Segments: st.Segments, Executed: st.Executed, Updated: h.now().UTC()}
		if err := h.Store.Index.PutRecord(r); err != nil {
			os.WriteFile(h.Store.Path("index.records-stale"), []byte(err.Error()+"\n"), 0o600)
		}
	}
	return im, nil
}

// checkNamed checks that every object the bundle's record (verified:
// st) names is in the bundle or already here, as Export puts them in:
// the genesis's unit (a durable unit of the bundle's sandbox) and
// grants; each suspension's workspace tree, every chunk of it, its
// environment manifest and its memory image, and, for an S2 sandbox's
// park, every object the park names; each run whole, every record its
// attestation binds beside it (checked under the attestation's own
// signer: that it is whole, not that its signer is trusted, which is
// the verifier's business). The first missing is refused (missing),
// named with the record line that names it.
func (h *Host) checkNamed(b *bundle, st record.State) error {
	entries, _, err := chain.Split(b.record)
	if err != nil {
		return err
	}
	blobs := bundleBlobs{b: b, store: h.Store}
	for _, a := range []addr.Addr{st.Header.Unit, st.Header.Grants} {
		if !blobs.HasBlob(a) {
			return reject.New(reject.Missing, "bundle: record line 1", "blob %s, which the record's genesis names", a)
		}
	}
	var u DurableUnit
	if ub, err := blobs.Blob(st.Header.Unit); err != nil || canon.Unmarshal(ub, &u) != nil || u.Sandbox != DurableUnitType || u.ID != b.manifest.Sandbox {
		return reject.New(reject.Invalid, "bundle: record line 1", "the genesis's unit %s is not sandbox %s's", st.Header.Unit, b.manifest.Sandbox)
	}
	seen := map[addr.Addr]bool{}
	for i, e := range entries[1:] {
		where := fmt.Sprintf("bundle: record line %d", i+2)
		seg, err := record.ParseSegment(e)
		if err != nil {
			return err
		}
		switch seg.Kind {
		case record.Executed:
			if err := h.checkRun(b, seg.Attestation, where); err != nil {
				return err
			}
		case record.Suspended:
			sn := seg.Snapshot
			if err := blobs.need(where, seen, sn.Manifest, "the suspension's environment manifest"); err != nil {
				return err
			}
			if err := blobs.need(where, seen, sn.Root, "the suspension's workspace tree"); err != nil {
				return err
			}
			t, err := tree.Load(blobs, sn.Root)
			if err != nil {
				return reject.In(where, err)
			}
			for _, te := range t.Entries {
				for _, c := range te.Chunks {
					if err := blobs.need(where, seen, c, fmt.Sprintf("a chunk of %q in the workspace tree %s", te.Path, sn.Root)); err != nil {
						return err
					}
				}
			}
			if sn.Memory == nil {
				continue
			}
			if err := blobs.need(where, seen, *sn.Memory, "the suspension's memory image"); err != nil {
				return err
			}
			if u.Tier != tier.S2 {
				continue // a VM's memory image is one object
			}
			mb, err := blobs.Blob(*sn.Memory)
			if err != nil {
				return err
			}
			park, err := parsePark(mb)
			if err != nil {
				return reject.In(fmt.Sprintf("%s: the memory image %s", where, *sn.Memory), err)
			}
			objs, err := park.objects(blobs)
			if err != nil {
				return reject.New(reject.Missing, where, "an object the park %s names: %v", *sn.Memory, err)
			}
			for _, a := range objs {
				if err := blobs.need(where, seen, a, "an object the park "+sn.Memory.String()+" names"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkRun checks that run a, which the record names at where, is here
// already or whole in the bundle.
func (h *Host) checkRun(b *bundle, a addr.Addr, where string) error {
	files, ok := b.runs[a]
	if !ok {
		if _, err := os.Stat(h.Store.Path("runs", a.Hex())); err != nil {
			return reject.New(reject.Missing, where, "run %s, which the record names", a)
		}
		return nil
	}
	p, ok := files[verify.FileAttestation]
	if !ok {
		return reject.New(reject.Missing, where, "run %s's attestation", a)
	}
	env, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	at, err := attest.Verify(env, key.Trust{})
	if at == nil {
		return fmt.Errorf("%s: run %s: %w", where, a, err)
	}
	v := &verify.Verifier{Trust: key.NewTrust(at.Claim.Signer)}
	for _, r := range v.Path(filepath.Dir(p)) {
		if r.Err != nil {
			return reject.In(fmt.Sprintf("%s: run %s: %s", where, a, filepath.Base(r.Path)), r.Err)
		}
	}
	return nil
}

// bundleBlobs are the blobs an import will have once it places the
// bundle: the bundle's (staged, each checked by address as it was read)
// and the store's.
type bundleBlobs struct {
	b     *bundle
	store *store.Store
}

// Blob reads blob a.
func (x bundleBlobs) Blob(a addr.Addr) ([]byte, error) {
	if p, ok := x.b.blobs[a]; ok {
		return os.ReadFile(p)
	}
	return x.store.Blob(a)
}

// HasBlob says whether blob a is in the bundle or here.
func (x bundleBlobs) HasBlob(a addr.Addr) bool {
	_, ok := x.b.blobs[a]
	return ok || x.store.HasBlob(a)
}

// PutBlob refuses: a bundle is read, not written.
func (bundleBlobs) PutBlob(addr.Addr, []byte) error {
	return errors.New("bundle: the blobs of a bundle being checked are not written")
}

// need refuses blob a, what the record names at where, when it is
// neither in the bundle nor here; seen skips one already checked.
func (x bundleBlobs) need(where string, seen map[addr.Addr]bool, a addr.Addr, what string) error {
	if seen[a] {
		return nil
	}
	if !x.HasBlob(a) {
		return reject.New(reject.Missing, where, "%s, %s, is neither in the bundle nor here", what, a)
	}
	seen[a] = true
	return nil
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
	blobs    map[addr.Addr]string            // staged, checked
	runs     map[addr.Addr]map[string]string // staged: stage/runs/HEX/NAME
}

// readBundle reads a bundle's entries, checking each name and bound, and
// every blob's and run's address, staging blobs and run files in stage
// (each fsynced). It reads hostile bytes: nothing leaves stage.
func readBundle(r io.Reader, stage string) (*bundle, error) {
	b := &bundle{blobs: map[addr.Addr]string{}, runs: map[addr.Addr]map[string]string{}}
	for _, d := range []string{"blobs", "runs"} {
		if err := os.Mkdir(filepath.Join(stage, d), 0o700); err != nil {
			return nil, err
		}
	}
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
		small := func(max int64) ([]byte, error) {
			if hd.Size > max {
				return nil, reject.New(reject.Invalid, where, "%d bytes, over %d", hd.Size, max)
			}
			data, err := io.ReadAll(io.LimitReader(tr, hd.Size+1))
			if err != nil {
				return nil, reject.Wrap(reject.Truncated, where, err)
			}
			if int64(len(data)) != hd.Size {
				return nil, reject.New(reject.Truncated, where, "%d bytes of %d", len(data), hd.Size)
			}
			return data, nil
		}
		switch {
		case n == 1 && name != "bundle.json":
			return nil, reject.New(reject.Unrecognised, where, "a bundle begins with bundle.json")
		case name == "bundle.json":
			if n != 1 {
				return nil, reject.New(reject.Invalid, where, "bundle.json twice")
			}
			data, err := small(1 << 20)
			if err != nil {
				return nil, err
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
			if b.record, err = small(MaxRecordBytes); err != nil {
				return nil, err
			}
		case name == "records/"+b.manifest.Sandbox+".json" && b.parked == nil:
			if b.parked, err = small(1 << 20); err != nil {
				return nil, err
			}
		case blobName.MatchString(name):
			a, _ := addr.Parse("b3:" + blobName.FindStringSubmatch(name)[1])
			if _, dup := b.blobs[a]; dup {
				return nil, reject.New(reject.Invalid, where, "twice")
			}
			p := filepath.Join(stage, "blobs", a.Hex())
			got, err := stageFile(tr, hd.Size, p, where)
			if err != nil {
				return nil, err
			}
			if got != a {
				return nil, reject.New(reject.Address, where, "its bytes hash to %s", got)
			}
			b.blobs[a] = p
		case runName.MatchString(name):
			m := runName.FindStringSubmatch(name)
			a, _ := addr.Parse("b3:" + m[1])
			if b.runs[a] == nil {
				if err := os.Mkdir(filepath.Join(stage, "runs", a.Hex()), 0o700); err != nil {
					return nil, err
				}
				b.runs[a] = map[string]string{}
			}
			if _, dup := b.runs[a][m[2]]; dup {
				return nil, reject.New(reject.Invalid, where, "twice")
			}
			p := filepath.Join(stage, "runs", a.Hex(), m[2])
			if _, err := stageFile(tr, hd.Size, p, where); err != nil {
				return nil, err
			}
			b.runs[a][m[2]] = p
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
		p, ok := files["attestation.json"]
		if !ok {
			return nil, reject.New(reject.Missing, "bundle: runs/"+a.Hex(), "no attestation.json")
		}
		env, err := os.ReadFile(p)
		if err != nil {
			return nil, err
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

// MaxRecordBytes bounds a record a bundle carries.
const MaxRecordBytes = 64 << 20

// stageFile copies size bytes of r to a new file p, fsynced, and returns
// their address.
func stageFile(r io.Reader, size int64, p, where string) (addr.Addr, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return addr.Addr{}, err
	}
	defer f.Close()
	h := blake3.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, size))
	if err != nil {
		return addr.Addr{}, reject.Wrap(reject.Truncated, where, err)
	}
	if n != size {
		return addr.Addr{}, reject.New(reject.Truncated, where, "%d bytes of %d", n, size)
	}
	if err := f.Sync(); err != nil {
		return addr.Addr{}, err
	}
	var a addr.Addr
	h.Sum(a[:0])
	return a, nil
}
