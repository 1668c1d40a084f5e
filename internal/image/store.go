package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/reject"
)

// Image is one imported image.
type Image struct {
	ID       string    `json:"id"`                 // its config's digest
	Manifest string    `json:"manifest,omitempty"` // its manifest's digest, where the source gave one
	Names    []string  `json:"names"`
	Layers   []Layer   `json:"layers"`
	Root     addr.Addr `json:"root"` // the address of its root filesystem's listing
	Files    int       `json:"files"`
	Bytes    int64     `json:"bytes"` // of its files
	Stats    Stats     `json:"left_out"`
	Config   RunConfig `json:"config"`
	Imported time.Time `json:"imported"`
}

// Layer is one layer as imported: the digest of its bytes as stored
// (none for a docker save layer) and of its tar stream.
type Layer struct {
	Digest string `json:"digest,omitempty"`
	DiffID string `json:"diff_id"`
}

// RunConfig is what an image's config says about running it.
type RunConfig struct {
	Env        []string `json:"env,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// Store keeps imported images under Dir.
type Store struct {
	Dir string
	// Progress, where set, is told during an import how many bytes of
	// the layers, as stored in the source, were read, and how many
	// there are (0 where a layer's size is not known: a docker save
	// archive names none).
	Progress func(done, total int64)
}

// RunsOwn are the top-level directories of a root filesystem that a run
// has of its own (the kernel's, its private /tmp, the host's own), never
// the root's: Top leaves them out, and a program there is not the root's.
var RunsOwn = []string{"/proc", "/dev", "/sys", "/tmp", "/.sandbox"}

// NotFoundError is a reference that names no imported image, or, for a
// caller (Among), none of those it may run in.
type NotFoundError struct {
	Ref   string
	Among bool // looked for among the caller's images only (ResolveAmong)
}

func (e *NotFoundError) Error() string {
	if e.Among {
		return fmt.Sprintf("no image that this caller may run in is %q (an image its policy does not list is not shown to it; the operator's 'sandbox image ls' lists them all)", e.Ref)
	}
	return fmt.Sprintf("no imported image is %q ('sandbox image ls' lists them; 'sandbox image import' adds one)", e.Ref)
}
func (e *NotFoundError) Unwrap() error { return fs.ErrNotExist }

// AmbiguousError is a prefix that names more than one image.
type AmbiguousError struct {
	Ref string
	IDs []string // each one's short ID, as told
	// Images are the images it names (the operator's to see: a caller
	// that may use none of them is told of none).
	Images []Image
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("%q names %d images (%s): give more of the ID", e.Ref, len(e.IDs), strings.Join(e.IDs, ", "))
}

// Invalid: an ambiguous reference is bad input.
func (e *AmbiguousError) Invalid() bool { return true }

func (s Store) lock() (func(), error) {
	if err := os.MkdirAll(filepath.Join(s.Dir, "images"), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(s.Dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// Import reads the images at src (an OCI layout, as a directory or a
// tar archive, or a docker save archive), checks every digest, unpacks
// each image's root filesystem and keeps it. Names given in names are
// added to every image imported (a tag moves from the image that had
// it). Nothing is kept unless the whole source imports.
func (s Store) Import(src string, names ...string) ([]Image, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	staging := filepath.Join(s.Dir, "staging")
	os.RemoveAll(staging) // what a killed import left
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return nil, err
	}
	defer os.RemoveAll(staging)
	if err := os.MkdirAll(filepath.Join(s.Dir, "roots"), 0o755); err != nil {
		return nil, err
	}
	if err := s.sweep(); err != nil {
		return nil, err
	}
	so, err := openSource(src, staging)
	if err != nil {
		return nil, err
	}
	defer so.close()
	found, err := readSource(so)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	var total int64
	for _, f := range found {
		for _, l := range f.layers {
			if l.size < 0 || total < 0 {
				total = -1
				continue
			}
			total += l.size
		}
	}
	read := &layerBytes{report: s.Progress, total: max(total, 0)}
	var out []Image
	for i, f := range found {
		img, err := s.unpack(so, f, filepath.Join(staging, fmt.Sprintf("root-%d", i)), read)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		img.Names = append(img.Names, names...)
		out = append(out, img)
	}
	// Every root is in place: now the images, each name moving to the
	// last image that claims it.
	all, err := s.list()
	if err != nil {
		return nil, err
	}
	for i := range out {
		img := &out[i]
		if old, ok := find(all, img.ID); ok {
			img.Names = append(old.Names, img.Names...)
			if img.Manifest == "" {
				img.Manifest = old.Manifest
			}
		}
		slices.Sort(img.Names)
		img.Names = slices.Compact(img.Names)
		if img.Names == nil {
			img.Names = []string{}
		}
		for _, other := range all {
			if other.ID == img.ID {
				continue
			}
			kept := slices.DeleteFunc(slices.Clone(other.Names), func(n string) bool { return slices.Contains(img.Names, n) })
			if len(kept) != len(other.Names) {
				other.Names = kept
				if err := s.write(other); err != nil {
					return nil, err
				}
			}
		}
		if err := s.write(*img); err != nil {
			return nil, err
		}
		all = append(slices.DeleteFunc(all, func(o Image) bool { return o.ID == img.ID }), *img)
	}
	return out, nil
}

// layerBytes counts the layer bytes an import read, for Store.Progress.
type layerBytes struct {
	report      func(done, total int64)
	done, total int64
}

func (c *layerBytes) counting(r io.Reader) io.Reader {
	if c.report == nil {
		return r
	}
	return readFunc(func(b []byte) (int, error) {
		n, err := r.Read(b)
		c.done += int64(n)
		c.report(c.done, c.total)
		return n, err
	})
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(b []byte) (int, error) { return f(b) }

func find(all []Image, id string) (Image, bool) {
	for _, o := range all {
		if o.ID == id {
			return o, true
		}
	}
	return Image{}, false
}

// unpack applies f's layers, checking each digest, and moves the root
// into roots/ under its address.
func (s Store) unpack(so source, f found, dir string, read *layerBytes) (Image, error) {
	img := Image{ID: f.configD.String(), Manifest: f.manifest, Names: f.names, Imported: time.Now().UTC()}
	c := f.cfg.Config
	img.Config = RunConfig{Env: c.Env, Entrypoint: c.Entrypoint, Cmd: c.Cmd, WorkingDir: c.WorkingDir, User: c.User}
	u, err := newUnpacker(dir)
	if err != nil {
		return img, err
	}
	defer u.close()
	for i, l := range f.layers {
		where := fmt.Sprintf("image %s layer %d (%s)", img.ID[:19], i, clip(l.name))
		r, err := so.open(l.name)
		if errors.Is(err, fs.ErrNotExist) {
			return img, reject.New(reject.Missing, where, "not in the source")
		}
		if err != nil {
			return img, err
		}
		var raw io.Reader = read.counting(r)
		var outer *verifier
		if l.compressed.alg != "" {
			outer = newVerifier(l.compressed, l.size, where)
			raw = io.TeeReader(r, outer)
		}
		// The diff_id is the digest of the tar stream, decompressed.
		inner := newVerifier(l.diffID, -1, where+" diff_id")
		err = u.apply(raw, inner, where)
		_, derr := io.Copy(io.Discard, raw)
		r.Close()
		// Bytes not the ones named are the cause to report, before
		// whatever they made the unpacking do.
		if outer != nil && (err == nil || derr == nil) {
			if cerr := outer.check(); cerr != nil {
				err = cerr
			}
		}
		if err == nil {
			err = derr
		}
		if err == nil {
			err = inner.check()
		}
		if err != nil {
			return img, err
		}
		img.Layers = append(img.Layers, Layer{Digest: digestOrEmpty(l.compressed), DiffID: l.diffID.String()})
	}
	img.Stats = u.stats
	if err := u.finish(); err != nil {
		return img, err
	}
	listing, a, st, err := list(dir)
	if err != nil {
		return img, err
	}
	img.Root, img.Bytes, img.Files = a, st.bytes, st.entries
	// Everything on the disk before the root is named by its address.
	syncDir(dir)
	crash.At(crash.ImageUnpacked)
	final := filepath.Join(s.Dir, "roots", a.Hex())
	if err := safefile.Write(final+".json", listing, 0o644); err != nil {
		return img, err
	}
	if _, err := os.Lstat(final); err == nil {
		return img, os.RemoveAll(dir) // the same files, kept already
	}
	if err := os.Rename(dir, final); err != nil {
		return img, err
	}
	if err := safefile.SyncDir(filepath.Dir(final)); err != nil {
		return img, err
	}
	crash.At(crash.ImageRenamed)
	return img, nil
}

// sweep removes roots no image names: what a killed import or removal
// left. The caller holds the lock.
func (s Store) sweep() error {
	all, err := s.list()
	if err != nil {
		return err
	}
	named := map[string]bool{}
	for _, img := range all {
		named[img.Root.Hex()] = true
	}
	ents, err := os.ReadDir(filepath.Join(s.Dir, "roots"))
	if err != nil {
		return err
	}
	for _, e := range ents {
		base := strings.TrimSuffix(e.Name(), ".json")
		if !named[base] {
			os.RemoveAll(filepath.Join(s.Dir, "roots", e.Name()))
		}
	}
	return nil
}

func digestOrEmpty(d digest) string {
	if d.alg == "" {
		return ""
	}
	return d.String()
}

func (s Store) write(img Image) error {
	b, err := json.MarshalIndent(img, "", "  ")
	if err != nil {
		return err
	}
	return safefile.Write(filepath.Join(s.Dir, "images", strings.TrimPrefix(img.ID, "sha256:")+".json"), append(b, '\n'), 0o644)
}

// List returns the imported images, newest first.
func (s Store) List() ([]Image, error) {
	all, err := s.list()
	sort.Slice(all, func(i, j int) bool { return all[i].Imported.After(all[j].Imported) })
	return all, err
}

func (s Store) list() ([]Image, error) {
	ents, err := os.ReadDir(filepath.Join(s.Dir, "images"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.Dir, "images", e.Name()))
		if err != nil {
			return nil, err
		}
		var img Image
		if err := json.Unmarshal(b, &img); err != nil {
			return nil, fmt.Errorf("images/%s: %w", e.Name(), reject.Wrap(reject.Malformed, "image record", err))
		}
		out = append(out, img)
	}
	return out, nil
}

// Resolve finds the image ref names: a name (":latest" when it has no
// tag), an ID or manifest digest, or a unique prefix of an ID's hex
// (at least 4 digits).
func (s Store) Resolve(ref string) (Image, error) {
	all, err := s.list()
	if err != nil {
		return Image{}, err
	}
	return resolve(all, ref)
}

// ResolveAmong is Resolve among the images may admits, for a caller
// who may run in those alone: one it may not is, to that caller, not
// there. It is not found with the same error as a name nothing has, and
// no prefix counts it, so that neither its existence nor its ID is told.
func (s Store) ResolveAmong(ref string, may func(Image) bool) (Image, error) {
	all, err := s.list()
	if err != nil {
		return Image{}, err
	}
	return resolveAmong(all, ref, may)
}

func resolveAmong(all []Image, ref string, may func(Image) bool) (Image, error) {
	var mine []Image
	for _, img := range all {
		if may(img) {
			mine = append(mine, img)
		}
	}
	img, err := resolve(mine, ref)
	if nf := (*NotFoundError)(nil); errors.As(err, &nf) {
		nf.Among = true
	}
	return img, err
}

func resolve(all []Image, ref string) (Image, error) {
	for _, img := range all {
		if img.ID == ref || img.Manifest == ref {
			return img, nil
		}
	}
	// name@digest: the digest decides; the name is a label.
	if _, d, ok := strings.Cut(ref, "@"); ok {
		for _, img := range all {
			if img.ID == d || img.Manifest == d {
				return img, nil
			}
		}
		return Image{}, &NotFoundError{Ref: ref}
	}
	for _, img := range all {
		for _, n := range img.Names {
			if n == ref || (!hasTag(ref) && n == ref+":latest") {
				return img, nil
			}
		}
	}
	hexRef := strings.TrimPrefix(ref, "sha256:")
	if len(hexRef) >= 4 && strings.Trim(hexRef, "0123456789abcdef") == "" {
		var hits []Image
		for _, img := range all {
			if strings.HasPrefix(strings.TrimPrefix(img.ID, "sha256:"), hexRef) {
				hits = append(hits, img)
			}
		}
		if len(hits) == 1 {
			return hits[0], nil
		}
		if len(hits) > 1 {
			ids := make([]string, len(hits))
			for i, h := range hits {
				ids[i] = h.ID[:19]
			}
			return Image{}, &AmbiguousError{Ref: ref, IDs: ids, Images: hits}
		}
	}
	return Image{}, &NotFoundError{Ref: ref}
}

// hasTag says whether a name has a tag after its last path element.
func hasTag(n string) bool {
	return strings.Contains(n[strings.LastIndex(n, "/")+1:], ":")
}

// Remove forgets the image ref names, and its root filesystem when no
// other image has the same.
func (s Store) Remove(ref string) (Image, error) {
	unlock, err := s.lock()
	if err != nil {
		return Image{}, err
	}
	defer unlock()
	all, err := s.list()
	if err != nil {
		return Image{}, err
	}
	img, err := resolve(all, ref)
	if err != nil {
		return img, err
	}
	if err := os.Remove(filepath.Join(s.Dir, "images", strings.TrimPrefix(img.ID, "sha256:")+".json")); err != nil {
		return img, err
	}
	for _, o := range all {
		if o.ID != img.ID && o.Root == img.Root {
			return img, nil
		}
	}
	root := filepath.Join(s.Dir, "roots", img.Root.Hex())
	// Out of the way first: a root half removed is never found by address.
	gone := filepath.Join(s.Dir, "roots", "."+img.Root.Hex()+".removed")
	if err := os.Rename(root, gone); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return img, err
	}
	os.Remove(root + ".json")
	return img, os.RemoveAll(gone)
}

// RootDir is the directory of the root filesystem at address a.
func (s Store) RootDir(a addr.Addr) (string, error) {
	d := filepath.Join(s.Dir, "roots", a.Hex())
	fi, err := os.Lstat(d)
	if err != nil || !fi.IsDir() {
		return "", fmt.Errorf("root filesystem %s is not on this host: import its image ('sandbox image import'): %w", a.Short(), fs.ErrNotExist)
	}
	return d, nil
}

// Verify lists img's root filesystem again and checks that it is still
// the one its address names.
func (s Store) Verify(img Image) error {
	return reject.In("image "+img.ID[:19], s.VerifyRoot(img.Root))
}

// VerifyRoot lists the root filesystem at address a again and checks
// that it is still the one a names.
func (s Store) VerifyRoot(root addr.Addr) error {
	d, err := s.RootDir(root)
	if err != nil {
		return err
	}
	_, a, _, err := list(d)
	if err != nil {
		return err
	}
	if a != root {
		return reject.New(reject.Address, "root filesystem "+root.Short(), "it now lists as %s: a file under %s changed", a.Short(), d)
	}
	return nil
}
