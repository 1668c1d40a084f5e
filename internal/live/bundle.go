package live

import (
	"github.com/opensubstrate/sandbox/internal/host"

	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sync"

	"github.com/zeebo/blake3"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/jcs"
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
// is the run): a tar stream of bundle.json, the record and its seals,
// every object the record names (its unit and grants, each snapshot's
// tree, chunks, environment manifest and memory image) and every run it
// names, whole (docs/spec/bundle.md). A bundle carries evidence, never
// authority: import takes nothing on trust. Every blob must hash to its
// name, every run's attestation to its directory's name, the record
// must verify from its genesis, every entry of it must be sealed by a
// key the importer trusts explicitly, a record that extends one here
// must carry this host's seals on what it had, and the grants its
// genesis binds must be ones the importing principal may give; only
// then is anything put in place. Nothing unsigned in it (no note beside
// the record) feeds a figure that lands in a record.

// BundleType is bundle.json's "bundle".
const BundleType = "sandbox.bundle/2"

// BundleManifest is a bundle's first entry.
type BundleManifest struct {
	Bundle  string     `json:"bundle"`  // BundleType
	Sandbox string     `json:"sandbox"` // whose record
	Head    addr.Addr  `json:"head"`    // the record's head when exported
	Signer  key.Public `json:"signer"`  // the exporting host's key, for people: trust is the seals'
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
func (h *Manager) Export(id string, w io.Writer) error {
	_, err := h.export(id, w, nil, 0)
	return err
}

// export writes a bundle of sandbox id and returns the objects its
// record names; with shared (a cluster's blob store, at epoch:
// BlobHolder) those go there instead, one by one, each stored only if
// shared lacks it, and the bundle carries only those shared holds but
// not whole.
func (h *Manager) export(id string, w io.Writer, shared store.Blobs, epoch int64) (named []addr.Addr, err error) {
	if !sandboxID.MatchString(id) {
		return nil, fmt.Errorf("%w: %q is not a sandbox id", ErrNoSandbox, id)
	}
	rb, err := os.ReadFile(h.RecordPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %q (no record of it here)", ErrNoSandbox, id)
	}
	if err != nil {
		return nil, err
	}
	entries, torn, err := chain.Split(rb)
	if err != nil {
		return nil, err
	}
	rb = rb[:len(rb)-torn]
	st, err := record.Verify(entries)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.RecordPath(id), err)
	}
	if st.Phase == record.Active {
		return nil, &host.InvalidError{Err: fmt.Errorf("sandbox %s is live: suspend it (or close it) before it is exported", id)}
	}
	blobList, runs, err := namedObjects(h.Store, entries)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.RecordPath(id), err)
	}
	// Every entry leaves sealed: one this host appended but did not seal
	// (it ended between the two), or whose seal a crash lost or left
	// unreadable, is sealed now, by opening the record.
	sealed := func() ([][]byte, error) {
		seals, err := record.ReadSeals(h.RecordPath(id))
		if err == nil {
			_, err = record.CheckSeals(id, entries, seals, func(key.Public) bool { return true })
		}
		return seals, err
	}
	seals, err := sealed()
	if err != nil && h.sealer(id) != nil {
		if f, err := h.openSealed(id); err == nil {
			f.Close()
		}
		seals, err = sealed()
	}
	if err != nil {
		return nil, fmt.Errorf("%s: its seals: %w", h.RecordPath(id), err)
	}
	tw := tar.NewWriter(w)
	put := tarPut(tw)
	mb, err := jcs.Marshal(BundleManifest{Bundle: BundleType, Sandbox: id, Head: st.Head, Signer: h.Key.Public()})
	if err != nil {
		return nil, err
	}
	if err := put("bundle.json", mb); err != nil {
		return nil, err
	}
	if err := put("records/"+id+".jsonl", rb); err != nil {
		return nil, err
	}
	var sb []byte
	for _, l := range seals[:len(entries)] {
		sb = append(append(sb, l...), '\n')
	}
	if err := put("records/"+id+".seals", sb); err != nil {
		return nil, err
	}
	carried := blobList
	if shared != nil {
		// What the store holds but not whole travels in the bundle.
		if carried, err = h.shareBlobs(shared, epoch, blobList); err != nil {
			return nil, err
		}
	}
	for _, a := range carried {
		b, err := h.Store.Blob(a)
		if err != nil {
			return nil, err
		}
		if err := put("blobs/"+a.Hex(), b); err != nil {
			return nil, err
		}
	}
	for _, a := range runs {
		if err := h.putRun(put, a); err != nil {
			return nil, fmt.Errorf("run %s, which the record names: %w", a, err)
		}
	}
	return blobList, tw.Close()
}

// blobWorkers is how many blobs are stored in, or fetched from, a
// cluster's blob store at once (each is a round trip to an S3 server).
const blobWorkers = 8

// shareBlobs stores in shared each blob of list that it lacks, from this
// host's store, blobWorkers at a time (the first failure is the error),
// and returns those shared holds but not whole, for the bundle to
// carry. Anyone who can write the store could have put other bytes
// under an address before this host did (a chunk's address is a
// well-known file's), and a store's put does not replace what it has:
// an object found there that this process has not seen whole is read
// back and checked once. What it saw under an earlier epoch than the
// store's now (a collection ran since) it looks at again.
func (h *Manager) shareBlobs(shared store.Blobs, epoch int64, list []addr.Addr) ([]addr.Addr, error) {
	bad := make([]bool, len(list))
	err := eachBlob(list, func(i int, a addr.Addr) error {
		if h.sharedKnown(a, epoch) {
			return nil
		}
		if shared.HasBlob(a) {
			if b, err := shared.Blob(a); err == nil && addr.Of(b) == a {
				h.sharedSeen(a, epoch)
				return nil
			} else {
				// Other bytes, no file but a link or a FIFO, or no
				// answer: it travels in the bundle.
				h.Logger().Warn("an object in the cluster's store could not be read back whole: it travels in the bundle", "blob", a, "err", err)
			}
			bad[i] = true
			return nil
		}
		b, err := h.Store.Blob(a)
		if err != nil {
			return err
		}
		if err := shared.PutBlob(a, b); err != nil {
			return fmt.Errorf("blob %s into the cluster's store: %w", a, err)
		}
		h.sharedSeen(a, epoch)
		return nil
	})
	var carry []addr.Addr
	for i, a := range list {
		if bad[i] {
			carry = append(carry, a)
		}
	}
	return carry, err
}

// eachBlob calls do for every address of list (with its index),
// blobWorkers at a time, and returns the error of the first address in
// list's order whose call failed; none is started once one has failed.
func eachBlob(list []addr.Addr, do func(int, addr.Addr) error) error {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   = make([]error, len(list))
		failed bool
		next   = make(chan int)
	)
	for range min(blobWorkers, len(list)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := do(i, list[i]); err != nil {
					mu.Lock()
					errs[i], failed = err, true
					mu.Unlock()
				}
			}
		}()
	}
	for i := range list {
		mu.Lock()
		stop := failed
		mu.Unlock()
		if stop {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// tarPut writes an entry of a bundle: a regular file, name, of b.
func tarPut(tw *tar.Writer) func(name string, b []byte) error {
	return func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(b)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
}

// putRun puts run a's directory, each regular file as runs/HEX/NAME.
func (h *Manager) putRun(put func(name string, b []byte) error, a addr.Addr) error {
	dir := h.Store.Path("runs", a.Hex())
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
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
	return nil
}

// Imported says what an import put in place.
type Imported struct {
	Sandbox      string
	Head         addr.Addr
	Phase        record.Phase
	Blobs, Runs  int
	Fetched      int          // of Blobs, those fetched from the cluster's store
	Signer       key.Public   // the exporting host's, as the bundle says
	Sealers      []key.Public // the keys that sealed its entries, each once, in order
	ReplacedPrev bool         // an older copy of the record was extended
}

// Import reads a bundle from r and puts the durable run it carries in
// this state directory, as owner's: checked whole first, then placed.
// Every entry of its record must be sealed by this host's key or one
// trust holds; the grants its genesis binds must be ones owner (held to
// ctx's narrowings) may give. A record already here is replaced only by
// one that extends it and carries its seals.
func (h *Manager) Import(ctx context.Context, r io.Reader, owner string, trust key.Trust) (Imported, error) {
	return h.importBundle(ctx, r, owner, trust, nil, 0)
}

// importBundle imports a bundle; with shared (a cluster's blob store, at
// epoch) an object its record names that is neither in the bundle nor
// here is fetched from there, checked against its address and staged as
// if the bundle had carried it.
func (h *Manager) importBundle(ctx context.Context, r io.Reader, owner string, trust key.Trust, shared store.Blobs, epoch int64) (Imported, error) {
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
	b.shared, b.stage, b.ctx, b.seen = shared, stage, ctx, func(a addr.Addr) { h.sharedSeen(a, epoch) }
	id := b.manifest.Sandbox
	im.Sandbox, im.Head, im.Signer = id, b.manifest.Head, b.manifest.Signer
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
	if err := h.checkBundle(ctx, b, st, owner, trust, &im); err != nil {
		return im, err
	}
	return im, h.place(b, st, stage, owner, &im)
}

// checkBundle checks what a bundle's record asks before anything is
// placed: its seals, the record here it extends, the objects it names,
// and the grants its genesis binds against owner's authority.
func (h *Manager) checkBundle(ctx context.Context, b *bundle, st record.State, owner string, trust key.Trust, im *Imported) error {
	id := b.manifest.Sandbox
	entries, _, _ := chain.Split(b.record)
	// Every entry sealed by a key trusted here, explicitly.
	seals, torn, err := chain.Split(b.seals)
	if err == nil && torn > 0 {
		err = reject.New(reject.Truncated, "records/"+id+".seals", "%d bytes without their newline", torn)
	}
	if err != nil {
		return fmt.Errorf("bundle: the record's seals: %w", err)
	}
	sealers, err := record.CheckSeals(id, entries, seals, func(k key.Public) bool {
		return trust.Trusts(k) || (!h.Key.IsZero() && k == h.Key.Public())
	})
	if err != nil {
		return fmt.Errorf("bundle: the record's seals: %w", err)
	}
	for _, k := range sealers {
		if !slices.Contains(im.Sealers, k) {
			im.Sealers = append(im.Sealers, k)
		}
	}
	// The record here, if any, must be a prefix of the one imported, and
	// the bundle must carry the seals this host holds of that prefix.
	path := h.RecordPath(id)
	if cur, err := os.ReadFile(path); err == nil {
		switch {
		case bytes.Equal(cur, b.record):
		case bytes.HasPrefix(b.record, cur):
			im.ReplacedPrev = true
		default:
			return reject.New(reject.Splice, path, "a different record of %s is here already: it is not a prefix of the one imported", id)
		}
		curEntries, _, _ := chain.Split(cur)
		curSeals, err := record.ReadSeals(path)
		if err != nil {
			return err
		}
		for i := range curEntries {
			if i >= len(curSeals) || !bytes.Equal(curSeals[i], seals[i]) {
				return reject.New(reject.Splice, fmt.Sprintf("bundle: entry %d", i+1), "the record here has that entry under a seal the bundle does not carry: a record that extends one here carries its seals")
			}
		}
	}
	// Every object the record names is in the bundle or already here.
	if err := h.checkNamed(b, st); err != nil {
		return err
	}
	src := bundleBlobs{b: b, store: h.Store}
	// What its genesis grants, the importer must be one who may give.
	u, given, err := genesisOf(src, st, id)
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := h.Authorize(ctx, owner, authority.Ask{Action: "import", Grants: given, Tier: u.Tier, Image: u.Root}); err != nil {
		return err
	}
	return nil
}

// place puts a checked bundle's objects, seals and record in place.
func (h *Manager) place(b *bundle, st record.State, stage, owner string, im *Imported) error {
	id := b.manifest.Sandbox
	runs := h.Store.Path("runs")
	path := h.RecordPath(id)
	// Place: blobs, runs, then the note, the seals and the record (what
	// names them) last. Each staged file was fsynced; a rename puts it in
	// place.
	blobs := h.Store.Path("blobs")
	if err := os.MkdirAll(blobs, 0o700); err != nil {
		return err
	}
	for a, staged := range b.blobs {
		if !h.Store.HasBlob(a) {
			if b.fetched[a] {
				im.Fetched++
			}
			if err := os.Rename(staged, filepath.Join(blobs, a.Hex())); err != nil {
				return err
			}
			im.Blobs++
		}
	}
	if err := safefile.SyncDir(blobs); err != nil {
		return err
	}
	for a := range b.runs {
		dir := h.Store.Path("runs", a.Hex())
		if _, err := os.Stat(dir); err == nil {
			continue
		}
		staged := filepath.Join(stage, "runs", a.Hex())
		if err := safefile.SyncDir(staged); err != nil {
			return err
		}
		row := store.RowOf(staged, a)
		h.Store.IndexBefore(row)
		if err := os.Rename(staged, dir); err != nil {
			return err
		}
		h.Store.IndexAfter(row)
		im.Runs++
	}
	if err := safefile.SyncDir(runs); err != nil {
		return err
	}
	if err := os.MkdirAll(h.Store.Path("records"), 0o700); err != nil {
		return err
	}
	if st.Phase == record.Parked {
		// Its parked interval here starts now, priced by what this host
		// retains of it, counted from the objects themselves: another
		// host's account of either is not evidence.
		retained, err := retainedBytes(h.Store, *st.Last)
		if err != nil {
			return err
		}
		if err := h.writeParked(id, parked{Owner: owner, Suspended: h.Now().UTC(), Retained: retained}); err != nil {
			return err
		}
	}
	if err := safefile.Write(record.SealPath(path), b.seals, 0o600); err != nil {
		return err
	}
	if err := safefile.Write(path, b.record, 0o600); err != nil {
		return err
	}
	if h.Store.Index != nil {
		r := store.IndexedRecord{ID: id, Phase: string(st.Phase), Head: st.Head, Segments: st.Segments, Executed: st.Executed, Updated: h.Now().UTC()}
		if err := h.Store.Index.PutRecord(r); err != nil {
			os.WriteFile(h.Store.Path("index.records-stale"), []byte(err.Error()+"\n"), 0o600)
		}
	}
	return nil
}

// checkNamed checks that every object the bundle's record (verified:
// st) names is in the bundle or already here, as Export puts them in
// (namedObjects), each run whole (checkRun). The first missing is
// refused (missing), naming it.
func (h *Manager) checkNamed(b *bundle, st record.State) error {
	entries, _, err := chain.Split(b.record)
	if err != nil {
		return err
	}
	src := bundleBlobs{b: b, store: h.Store}
	blobList, runList, err := namedObjects(src, entries)
	if err != nil {
		return reject.In("bundle", err)
	}
	if err := eachBlob(blobList, func(_ int, a addr.Addr) error {
		err := src.have(a)
		switch {
		case errors.Is(err, errNotHere) && b.shared != nil:
			return reject.New(reject.Missing, "bundle", "blob %s, which the record names, is neither in the bundle, nor here, nor in the cluster's store", a)
		case errors.Is(err, errNotHere):
			return reject.New(reject.Missing, "bundle", "blob %s, which the record names, is neither in the bundle nor here", a)
		}
		return err
	}); err != nil {
		return err
	}
	for _, a := range runList {
		if err := h.checkRun(b, a, "bundle"); err != nil {
			return err
		}
	}
	return nil
}

// checkRun checks that run a, which the record names at where, is here
// already or whole in the bundle: every record its attestation binds
// beside it (checked under the attestation's own signer: that it is
// whole, not that its signer is trusted, which the seals decide).
func (h *Manager) checkRun(b *bundle, a addr.Addr, where string) error {
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
	// Whole as it was sealed: a software-grounded S6 run is carried as
	// such (its claim says so), not refused here.
	v := &verify.Verifier{Trust: key.NewTrust(at.Claim.Signer), AllowSoftware: true}
	for _, r := range v.Path(filepath.Dir(p)) {
		if r.Err != nil {
			return reject.In(fmt.Sprintf("%s: run %s: %s", where, a, filepath.Base(r.Path)), r.Err)
		}
	}
	return nil
}

// bundleBlobs are the blobs a bundle staged, then this host's store.
type bundleBlobs struct {
	b     *bundle
	store *store.Store
}

func (s bundleBlobs) Blob(a addr.Addr) ([]byte, error) {
	if p, ok := s.b.staged(a); ok {
		return os.ReadFile(p) // hashed to a when it was staged
	}
	if s.store.HasBlob(a) || s.b.shared == nil {
		return s.store.Blob(a)
	}
	p, err := s.b.fetch(a)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

// HasBlob says blob a is in the bundle or here, or that fetching it from
// the cluster's store failed otherwise than by its absence: Blob then
// says why, so that a reader of it reports that, not a missing blob.
func (s bundleBlobs) HasBlob(a addr.Addr) bool { return !errors.Is(s.have(a), errNotHere) }

// have says whether blob a is in the bundle or here, fetching it from
// the cluster's store where the bundle is a cluster's: nil, errNotHere,
// or why the cluster's copy was not taken.
func (s bundleBlobs) have(a addr.Addr) error {
	if _, ok := s.b.staged(a); ok || s.store.HasBlob(a) {
		return nil
	}
	if s.b.shared == nil {
		return errNotHere
	}
	_, err := s.b.fetch(a)
	return err
}

var errNotHere = errors.New("not here")

// staged is where blob a was staged, if it was.
func (b *bundle) staged(a addr.Addr) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.blobs[a]
	return p, ok
}

// fetch stages blob a from the cluster's store, checked against its
// address (the store is not trusted), and returns where.
func (b *bundle) fetch(a addr.Addr) (string, error) {
	if p, ok := b.staged(a); ok {
		return p, nil
	}
	var data []byte
	var err error
	if bc, ok := b.shared.(interface {
		BlobContext(context.Context, addr.Addr) ([]byte, error)
	}); ok && b.ctx != nil {
		data, err = bc.BlobContext(b.ctx, a) // an S3 server that does not answer does not hold the import
	} else {
		data, err = b.shared.Blob(a)
	}
	where := "the cluster's store: blob " + a.String()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", errNotHere
	case errors.Is(err, store.ErrCorrupt):
		return "", reject.Wrap(reject.Address, where, err)
	case err != nil:
		return "", fmt.Errorf("blob %s from the cluster's store: %w", a, err)
	}
	b.mu.Lock()
	full := len(b.blobs) >= MaxBundleEntries
	b.mu.Unlock()
	if full {
		// What the entries of a whole bundle are bounded by bounds the
		// objects fetched for one too.
		return "", reject.New(reject.Invalid, "bundle", "its record names more than %d objects", MaxBundleEntries)
	}
	// Staged as a bundle's blob is (stageFile: fsynced, hashed), outside
	// the lock, so that fetches write side by side.
	p := filepath.Join(b.stage, "blobs", a.Hex())
	got, err := stageFile(bytes.NewReader(data), int64(len(data)), p, where)
	if err != nil {
		return "", err
	}
	if got != a {
		os.Remove(p)
		return "", reject.New(reject.Address, where, "its bytes hash to %s", got)
	}
	if b.seen != nil {
		b.seen(a) // seen whole there
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.blobs[a] = p
	b.fetched[a] = true
	return p, nil
}

func (s bundleBlobs) PutBlob(addr.Addr, []byte) error {
	return errors.New("a bundle's objects are read, never written")
}

// namedObjects lists every object a record names: the blobs (its unit,
// grants and environment manifest, each snapshot's tree with its chunks,
// environment manifest and memory image, an S2 memory image's parked
// execs' objects) and the runs (each Executed segment's), each once, in
// the record's order. Trees and parks are read from src, and refused
// when they do not parse.
func namedObjects(src tree.Blobs, entries [][]byte) (blobs, runs []addr.Addr, err error) {
	st, err := record.Verify(entries)
	if err != nil {
		return nil, nil, err
	}
	seen := map[addr.Addr]bool{}
	add := func(a addr.Addr) {
		if !a.IsZero() && !seen[a] {
			seen[a] = true
			blobs = append(blobs, a)
		}
	}
	add(st.Header.Unit)
	add(st.Header.Grants)
	if !src.HasBlob(st.Header.Unit) {
		return nil, nil, reject.New(reject.Missing, "bundle", "blob %s, the unit the record's genesis names", st.Header.Unit)
	}
	var u DurableUnit
	ub, err := src.Blob(st.Header.Unit)
	if err == nil {
		err = jcs.Unmarshal(ub, &u)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("the record's unit %s: %w", st.Header.Unit, err)
	}
	add(u.Manifest)
	ranSeen := map[addr.Addr]bool{}
	for _, e := range entries[1:] {
		seg, err := record.ParseSegment(e)
		if err != nil {
			return nil, nil, err
		}
		switch seg.Kind {
		case record.Executed:
			if !ranSeen[seg.Attestation] {
				ranSeen[seg.Attestation] = true
				runs = append(runs, seg.Attestation)
			}
		case record.Suspended, record.Forked:
			snap := seg.Snapshot
			add(snap.Manifest)
			if !seen[snap.Root] {
				if !src.HasBlob(snap.Root) {
					return nil, nil, reject.New(reject.Missing, "bundle", "the snapshot's tree %s, which the record names", snap.Root)
				}
				t, err := tree.Load(src, snap.Root)
				if err != nil {
					return nil, nil, fmt.Errorf("the snapshot's tree %s: %w", snap.Root, err)
				}
				add(snap.Root)
				for _, e := range t.Entries {
					for _, c := range e.Chunks {
						add(c)
					}
				}
			}
			if m := snap.Memory; m != nil && !seen[*m] {
				add(*m)
				if u.Tier == tier.S2 {
					if !src.HasBlob(*m) {
						return nil, nil, reject.New(reject.Missing, "bundle", "the snapshot's memory image %s, which the record names", *m)
					}
					pb, err := src.Blob(*m)
					var p S2Park
					if err == nil {
						p, err = parsePark(pb)
					}
					if err != nil {
						return nil, nil, fmt.Errorf("the snapshot's memory image %s: %w", *m, err)
					}
					objs, err := p.objectsIn(src)
					if err != nil {
						return nil, nil, reject.New(reject.Missing, "bundle", "an object the park %s names: %v", *m, err)
					}
					for _, a := range objs {
						add(a)
					}
				}
			}
		}
	}
	return blobs, runs, nil
}

// genesisOf is the unit and the grant set a record's genesis binds, read
// from src: the unit must be sandbox id's.
func genesisOf(src tree.Blobs, st record.State, id string) (DurableUnit, grant.Set, error) {
	var u DurableUnit
	ub, err := src.Blob(st.Header.Unit)
	if err == nil {
		err = jcs.Unmarshal(ub, &u)
	}
	if err != nil {
		return u, grant.Set{}, fmt.Errorf("the record's unit: %w", err)
	}
	if u.Sandbox != DurableUnitType {
		return u, grant.Set{}, reject.New(reject.Unrecognised, "unit", "%q, want %q", u.Sandbox, DurableUnitType)
	}
	if u.ID != id {
		return u, grant.Set{}, reject.New(reject.Invalid, "unit", "the genesis's unit %s is sandbox %s's, not %s's", st.Header.Unit, u.ID, id)
	}
	gb, err := src.Blob(st.Header.Grants)
	if err != nil {
		return u, grant.Set{}, fmt.Errorf("the record's grants: %w", err)
	}
	g, err := grant.Decode(gb)
	if err != nil {
		return u, grant.Set{}, fmt.Errorf("the record's grants: %w", err)
	}
	return u, g, nil
}

// retainedBytes is what a snapshot retains: its tree's files and its
// memory image, counted from the objects in s.
func retainedBytes(s *store.Store, snap record.Snapshot) (int64, error) {
	t, err := tree.Load(s, snap.Root)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range t.Entries {
		n += e.Size
	}
	if snap.Memory != nil {
		fi, err := os.Stat(s.Path("blobs", snap.Memory.Hex()))
		if err != nil {
			return 0, err
		}
		n += fi.Size()
	}
	return n, nil
}

// bundle is a bundle read and checked by address.
type bundle struct {
	manifest BundleManifest
	record   []byte
	seals    []byte
	runs     map[addr.Addr]map[string]string // staged: stage/runs/HEX/NAME
	// A cluster's bundle carries no blobs: those its record names that
	// are not here are fetched from shared into stage (fetched).
	shared store.Blobs
	stage  string
	ctx    context.Context
	seen   func(addr.Addr)      // the importing manager's sharedSeen
	mu     sync.Mutex           // blobs, fetched
	blobs  map[addr.Addr]string // staged, checked
	// fetched are the staged blobs that came from shared.
	fetched map[addr.Addr]bool
}

// readBundle reads a bundle's entries, checking each name and bound, and
// every blob's and run's address, staging blobs and run files in stage
// (each fsynced). It reads hostile bytes: nothing leaves stage.
func readBundle(r io.Reader, stage string) (*bundle, error) {
	b := &bundle{blobs: map[addr.Addr]string{}, runs: map[addr.Addr]map[string]string{}, fetched: map[addr.Addr]bool{}}
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
			if err := jcs.Unmarshal(data, &b.manifest); err != nil {
				return nil, fmt.Errorf("bundle.json: %w", err)
			}
			if b.manifest.Bundle != BundleType {
				return nil, reject.New(reject.Unrecognised, "bundle.json", "%q, want %q (a sandbox.bundle/1 carries no seals: export it again from a host that seals its records)", b.manifest.Bundle, BundleType)
			}
			if !sandboxID.MatchString(b.manifest.Sandbox) {
				return nil, reject.New(reject.Invalid, "bundle.json", "sandbox %q is not a sandbox id", b.manifest.Sandbox)
			}
		case name == "records/"+b.manifest.Sandbox+".jsonl" && b.record == nil:
			if b.record, err = small(MaxRecordBytes); err != nil {
				return nil, err
			}
		case name == "records/"+b.manifest.Sandbox+".seals" && b.seals == nil:
			if b.seals, err = small(MaxRecordBytes); err != nil {
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
	if b.seals == nil {
		return nil, reject.New(reject.Missing, "bundle", "no seals of the record: every entry is sealed by the host that appended it")
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
