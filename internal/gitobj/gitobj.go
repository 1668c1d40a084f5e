package gitobj

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
)

// ID is an object's name: the SHA-1 of its type, size and content.
type ID [20]byte

func (id ID) String() string { return hex.EncodeToString(id[:]) }

// ParseID reads a full, lower-case hex object name.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 40 || strings.ToLower(s) != s {
		return id, fmt.Errorf("object name %q: not 40 lower-case hex digits (only SHA-1 repositories are read)", s)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("object name %q: %w", s, err)
	}
	return id, nil
}

// Limits on what is read.
const (
	MaxObject     = 64 << 20 // bytes of one commit, tree or tag object
	MaxDeltaChain = 4096     // deltas applied to reach one object
	maxRefsFile   = 64 << 20
)

// ErrNotFound is wrapped when an object or a ref is not in the repository.
var ErrNotFound = errors.New("not in the repository")

// Object types.
const (
	Commit = "commit"
	Tree   = "tree"
	Blob   = "blob"
	Tag    = "tag"
)

// Repo is a repository's git directory, opened for reading.
type Repo struct {
	root  *os.Root
	packs []*pack
	// cache holds objects resolved from packs, by pack and offset (delta
	// bases), up to cacheMax bytes.
	cache     map[packKey]packed
	cacheSize int
}

type packKey struct {
	p   *pack
	off int64
}

type packed struct {
	kind string
	data []byte
}

const cacheMax = 32 << 20

// Open opens the git directory dir (a repository's .git, or a bare one).
// Only a SHA-1 repository is read.
func Open(dir string) (*Repo, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	r := &Repo{root: root, cache: map[packKey]packed{}}
	if cfg, err := root.ReadFile("config"); err == nil && objectFormat(cfg) != "" && objectFormat(cfg) != "sha1" {
		root.Close()
		return nil, fmt.Errorf("%s: a %s repository; only SHA-1 ones are read", dir, objectFormat(cfg))
	}
	ents, err := fs.ReadDir(root.FS(), "objects/pack")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		root.Close()
		return nil, err
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".idx")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		p, err := openPack(root, "objects/pack/"+name)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.packs = append(r.packs, p)
	}
	return r, nil
}

// objectFormat is extensions.objectformat in a config file ("" if unset).
func objectFormat(cfg []byte) string {
	section := ""
	for _, line := range strings.Split(string(cfg), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			section = strings.ToLower(strings.Trim(line, "[] \t"))
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && section == "extensions" && strings.EqualFold(strings.TrimSpace(k), "objectformat") {
			return strings.ToLower(strings.TrimSpace(v))
		}
	}
	return ""
}

// Close releases the repository's files.
func (r *Repo) Close() error {
	for _, p := range r.packs {
		p.f.Close()
	}
	return r.root.Close()
}

// Branch is the commit refs/heads/name names: its loose ref, else its
// line in packed-refs. A symbolic ref is not followed.
func (r *Repo) Branch(name string) (ID, error) {
	ref := "refs/heads/" + name
	if !fs.ValidPath(ref) {
		return ID{}, fmt.Errorf("ref %q: not a valid path", ref)
	}
	if fi, err := r.root.Lstat(ref); err == nil {
		if !fi.Mode().IsRegular() || fi.Size() > 4096 {
			return ID{}, fmt.Errorf("%s: not a ref file", ref)
		}
		b, err := r.root.ReadFile(ref)
		if err != nil {
			return ID{}, err
		}
		s := strings.TrimSuffix(string(b), "\n")
		if strings.HasPrefix(s, "ref: ") {
			return ID{}, fmt.Errorf("%s is a symbolic ref (%s)", ref, strings.TrimPrefix(s, "ref: "))
		}
		id, err := ParseID(s)
		if err != nil {
			return ID{}, fmt.Errorf("%s: %w", ref, err)
		}
		return id, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return ID{}, err
	}
	id, err := r.packedRef(ref)
	if err != nil {
		return ID{}, err
	}
	return id, nil
}

// packedRef finds ref in packed-refs.
func (r *Repo) packedRef(ref string) (ID, error) {
	fi, err := r.root.Lstat("packed-refs")
	if errors.Is(err, fs.ErrNotExist) {
		return ID{}, fmt.Errorf("%s: %w", ref, ErrNotFound)
	}
	if err != nil {
		return ID{}, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxRefsFile {
		return ID{}, errors.New("packed-refs: not a regular file of refs")
	}
	b, err := r.root.ReadFile("packed-refs")
	if err != nil {
		return ID{}, err
	}
	return findPackedRef(b, ref)
}

// findPackedRef reads packed-refs bytes for ref.
func findPackedRef(b []byte, ref string) (ID, error) {
	for i, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' || line[0] == '^' {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if !ok {
			return ID{}, fmt.Errorf("packed-refs line %d: no ref name", i+1)
		}
		if rest != ref {
			continue
		}
		id, err := ParseID(name)
		if err != nil {
			return ID{}, fmt.Errorf("packed-refs line %d: %w", i+1, err)
		}
		return id, nil
	}
	return ID{}, fmt.Errorf("%s: %w", ref, ErrNotFound)
}

// Read returns object id's type and content, checked against its name.
func (r *Repo) Read(id ID) (string, []byte, error) {
	kind, data, err := r.read(id)
	if err != nil {
		return "", nil, fmt.Errorf("object %s: %w", id, err)
	}
	if got := Name(kind, data); got != id {
		return "", nil, fmt.Errorf("object %s: its content hashes to %s", id, got)
	}
	return kind, data, nil
}

func (r *Repo) read(id ID) (string, []byte, error) {
	h := id.String()
	p := "objects/" + h[:2] + "/" + h[2:]
	if fi, err := r.root.Lstat(p); err == nil {
		if !fi.Mode().IsRegular() {
			return "", nil, errors.New("its loose file is not a regular file")
		}
		f, err := r.root.Open(p)
		if err != nil {
			return "", nil, err
		}
		defer f.Close()
		return readLoose(f)
	}
	for _, pk := range r.packs {
		if off, ok := pk.find(id); ok {
			return r.unpack(pk, off, 0)
		}
	}
	return "", nil, ErrNotFound
}

// Name is the name of an object of kind with data.
func Name(kind string, data []byte) ID {
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", kind, len(data))
	h.Write(data)
	var id ID
	h.Sum(id[:0])
	return id
}

// readLoose reads a loose object: zlib("type size\0content").
func readLoose(f io.Reader) (string, []byte, error) {
	z, err := zlib.NewReader(f)
	if err != nil {
		return "", nil, fmt.Errorf("loose object: %w", err)
	}
	defer z.Close()
	br := bufio.NewReader(io.LimitReader(z, MaxObject+64))
	hdr, err := br.ReadString(0)
	if err != nil {
		return "", nil, fmt.Errorf("loose object header: %w", err)
	}
	kind, size, ok := strings.Cut(strings.TrimSuffix(hdr, "\x00"), " ")
	n, err := strconv.ParseUint(size, 10, 63)
	if !ok || err != nil || !validKind(kind) || strconv.FormatUint(n, 10) != size {
		return "", nil, fmt.Errorf("loose object header %q: not \"TYPE SIZE\"", hdr)
	}
	if n > MaxObject {
		return "", nil, fmt.Errorf("a %s of %d bytes: over %d", kind, n, MaxObject)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(br, data); err != nil {
		return "", nil, fmt.Errorf("loose object: %d bytes promised: %w", n, err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return "", nil, errors.New("loose object: bytes after its content")
	}
	return kind, data, nil
}

func validKind(k string) bool { return k == Commit || k == Tree || k == Blob || k == Tag }

// CommitTree is the tree commit id names.
func (r *Repo) CommitTree(id ID) (ID, error) {
	kind, data, err := r.Read(id)
	if err != nil {
		return ID{}, err
	}
	if kind != Commit {
		return ID{}, fmt.Errorf("object %s is a %s, not a commit", id, kind)
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	t, ok := bytes.CutPrefix(line, []byte("tree "))
	if !ok {
		return ID{}, fmt.Errorf("commit %s: its first line is not its tree", id)
	}
	return ParseID(string(t))
}

// Entry is one entry of a tree.
type Entry struct {
	Mode uint32 // 040000, 0100644, 0100755, 0120000 or 0160000
	Name string
	ID   ID
}

// Tree modes.
const (
	ModeDir     = 0o40000
	ModeFile    = 0o100644
	ModeExec    = 0o100755
	ModeLink    = 0o120000
	ModeGitlink = 0o160000
)

// Tree reads tree object id.
func (r *Repo) Tree(id ID) ([]Entry, error) {
	kind, data, err := r.Read(id)
	if err != nil {
		return nil, err
	}
	if kind != Tree {
		return nil, fmt.Errorf("object %s is a %s, not a tree", id, kind)
	}
	es, err := ParseTree(data)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", id, err)
	}
	return es, nil
}

// ParseTree reads a tree's content: entries "MODE NAME\0" and 20 bytes.
// A name that is empty, ".", "..", ".git" (in any case), or holds a
// slash is refused, as is a name twice or an unknown mode.
func ParseTree(b []byte) ([]Entry, error) {
	var es []Entry
	seen := map[string]bool{}
	for off := 0; len(b) > 0; {
		sp := bytes.IndexByte(b, ' ')
		nul := bytes.IndexByte(b, 0)
		if sp <= 0 || nul < sp || len(b) < nul+21 {
			return nil, fmt.Errorf("entry at byte %d: not \"MODE NAME\\0\" and an object name", off)
		}
		m, err := strconv.ParseUint(string(b[:sp]), 8, 32)
		if err != nil {
			return nil, fmt.Errorf("entry at byte %d: mode %q", off, b[:sp])
		}
		mode := uint32(m)
		switch mode {
		case ModeDir, ModeFile, ModeExec, ModeLink, ModeGitlink, 0o100664:
		default:
			return nil, fmt.Errorf("entry at byte %d: mode %o", off, mode)
		}
		name := string(b[sp+1 : nul])
		if name == "" || name == "." || name == ".." || strings.EqualFold(name, ".git") || strings.ContainsAny(name, "/\x00") {
			return nil, fmt.Errorf("entry at byte %d: name %q", off, name)
		}
		if seen[name] {
			return nil, fmt.Errorf("entry at byte %d: %q twice", off, name)
		}
		seen[name] = true
		var id ID
		copy(id[:], b[nul+1:nul+21])
		es = append(es, Entry{Mode: mode, Name: name, ID: id})
		off += nul + 21
		b = b[nul+21:]
	}
	return es, nil
}

// pack is one pack file and its index (version 2).
type pack struct {
	name   string
	f      *os.File
	size   int64
	fanout [256]uint32
	names  []byte // n × 20
	offs   []byte // n × 4
	large  []byte // 8 each
}

func openPack(root *os.Root, base string) (*pack, error) {
	idx, err := root.ReadFile(base + ".idx")
	if err != nil {
		return nil, err
	}
	p := &pack{name: base}
	if err := p.parseIndex(idx); err != nil {
		return nil, fmt.Errorf("%s.idx: %w", base, err)
	}
	fi, err := root.Lstat(base + ".pack")
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s.pack: not a regular file", base)
	}
	f, err := root.Open(base + ".pack")
	if err != nil {
		return nil, err
	}
	p.f, p.size = f, fi.Size()
	var hdr [12]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil || string(hdr[:4]) != "PACK" || (binary.BigEndian.Uint32(hdr[4:]) != 2 && binary.BigEndian.Uint32(hdr[4:]) != 3) {
		f.Close()
		return nil, fmt.Errorf("%s.pack: not a pack of version 2 or 3", base)
	}
	return p, nil
}

// parseIndex reads a version 2 pack index.
func (p *pack) parseIndex(b []byte) error {
	if len(b) < 8+256*4 || string(b[:4]) != "\xfftOc" || binary.BigEndian.Uint32(b[4:]) != 2 {
		return errors.New("not a version 2 pack index")
	}
	prev := uint32(0)
	for i := range 256 {
		v := binary.BigEndian.Uint32(b[8+4*i:])
		if v < prev {
			return fmt.Errorf("fan-out entry %d goes down", i)
		}
		p.fanout[i], prev = v, v
	}
	n := int(prev)
	rest := b[8+256*4:]
	if n > len(rest)/28 {
		return fmt.Errorf("%d objects do not fit in %d bytes", n, len(rest))
	}
	p.names = rest[:20*n]
	p.offs = rest[24*n : 28*n] // after the names and their CRCs
	p.large = rest[28*n:]
	for i := 1; i < n; i++ {
		if bytes.Compare(p.names[20*(i-1):20*i], p.names[20*i:20*(i+1)]) >= 0 {
			return fmt.Errorf("object names out of order at %d", i)
		}
	}
	return nil
}

// find is object id's offset in the pack.
func (p *pack) find(id ID) (int64, bool) {
	lo := uint32(0)
	if id[0] > 0 {
		lo = p.fanout[id[0]-1]
	}
	hi := p.fanout[id[0]]
	for lo < hi {
		mid := lo + (hi-lo)/2
		switch c := bytes.Compare(p.names[20*mid:20*mid+20], id[:]); {
		case c == 0:
			o := binary.BigEndian.Uint32(p.offs[4*mid:])
			if o&0x80000000 == 0 {
				return int64(o), true
			}
			i := int(o & 0x7fffffff)
			if 8*i+8 > len(p.large) {
				return 0, false
			}
			v := binary.BigEndian.Uint64(p.large[8*i:])
			if v > 1<<62 {
				return 0, false
			}
			return int64(v), true
		case c < 0:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return 0, false
}

// Pack entry types.
const (
	objCommit   = 1
	objTree     = 2
	objBlob     = 3
	objTag      = 4
	objOfsDelta = 6
	objRefDelta = 7
)

var kinds = map[int]string{objCommit: Commit, objTree: Tree, objBlob: Blob, objTag: Tag}

// unpack reads the object at off, resolving deltas (depth so far).
func (r *Repo) unpack(p *pack, off int64, depth int) (string, []byte, error) {
	if c, ok := r.cache[packKey{p, off}]; ok {
		return c.kind, c.data, nil
	}
	if depth > MaxDeltaChain {
		return "", nil, fmt.Errorf("a delta chain over %d long", MaxDeltaChain)
	}
	if off < 12 || off >= p.size {
		return "", nil, fmt.Errorf("offset %d outside the pack", off)
	}
	sr := io.NewSectionReader(p.f, off, p.size-off)
	br := bufio.NewReader(sr)
	typ, size, err := entryHeader(br)
	if err != nil {
		return "", nil, fmt.Errorf("%s.pack at %d: %w", p.name, off, err)
	}
	if size > MaxObject {
		return "", nil, fmt.Errorf("%s.pack at %d: %d bytes, over %d", p.name, off, size, MaxObject)
	}
	var kind string
	var data []byte
	switch typ {
	case objCommit, objTree, objBlob, objTag:
		kind = kinds[typ]
		if data, err = inflate(br, size); err != nil {
			return "", nil, fmt.Errorf("%s.pack at %d: %w", p.name, off, err)
		}
	case objOfsDelta, objRefDelta:
		var base string
		var bdata []byte
		if typ == objOfsDelta {
			back, err := ofsDelta(br)
			if err != nil || back <= 0 || back > off {
				return "", nil, fmt.Errorf("%s.pack at %d: a delta's base offset", p.name, off)
			}
			base, bdata, err = r.unpack(p, off-back, depth+1)
			if err != nil {
				return "", nil, err
			}
		} else {
			var id ID
			if _, err := io.ReadFull(br, id[:]); err != nil {
				return "", nil, fmt.Errorf("%s.pack at %d: a delta's base name: %w", p.name, off, err)
			}
			bo, ok := p.find(id)
			if !ok {
				return "", nil, fmt.Errorf("%s.pack at %d: its delta's base %s is not in the pack", p.name, off, id)
			}
			if base, bdata, err = r.unpack(p, bo, depth+1); err != nil {
				return "", nil, err
			}
		}
		delta, err := inflate(br, size)
		if err != nil {
			return "", nil, fmt.Errorf("%s.pack at %d: %w", p.name, off, err)
		}
		if data, err = ApplyDelta(bdata, delta); err != nil {
			return "", nil, fmt.Errorf("%s.pack at %d: %w", p.name, off, err)
		}
		kind = base
	default:
		return "", nil, fmt.Errorf("%s.pack at %d: entry type %d", p.name, off, typ)
	}
	if r.cacheSize+len(data) > cacheMax {
		clear(r.cache)
		r.cacheSize = 0
	}
	r.cache[packKey{p, off}] = packed{kind, data}
	r.cacheSize += len(data)
	return kind, data, nil
}

// entryHeader reads a pack entry's type and size.
func entryHeader(br io.ByteReader) (int, int64, error) {
	c, err := br.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	typ := int(c>>4) & 7
	size := int64(c & 15)
	for shift := 4; c&0x80 != 0; shift += 7 {
		if shift > 56 {
			return 0, 0, errors.New("an entry size over 63 bits")
		}
		if c, err = br.ReadByte(); err != nil {
			return 0, 0, err
		}
		size |= int64(c&0x7f) << shift
	}
	return typ, size, nil
}

// ofsDelta reads an offset delta's distance back to its base.
func ofsDelta(br io.ByteReader) (int64, error) {
	c, err := br.ReadByte()
	if err != nil {
		return 0, err
	}
	off := int64(c & 0x7f)
	for c&0x80 != 0 {
		if off > 1<<55 {
			return 0, errors.New("an offset over 63 bits")
		}
		if c, err = br.ReadByte(); err != nil {
			return 0, err
		}
		off = (off+1)<<7 | int64(c&0x7f)
	}
	return off, nil
}

// inflate reads exactly size bytes of zlib data.
func inflate(r io.Reader, size int64) ([]byte, error) {
	z, err := zlib.NewReader(r)
	if err != nil {
		return nil, err
	}
	defer z.Close()
	data := make([]byte, size)
	if _, err := io.ReadFull(z, data); err != nil {
		return nil, fmt.Errorf("%d bytes promised: %w", size, err)
	}
	var one [1]byte
	if n, _ := z.Read(one[:]); n != 0 {
		return nil, errors.New("more bytes than promised")
	}
	return data, nil
}

// ApplyDelta applies a git delta to base.
func ApplyDelta(base, delta []byte) ([]byte, error) {
	src, n, err := deltaSize(delta)
	if err != nil {
		return nil, err
	}
	delta = delta[n:]
	dst, n, err := deltaSize(delta)
	if err != nil {
		return nil, err
	}
	delta = delta[n:]
	if src != uint64(len(base)) {
		return nil, fmt.Errorf("a delta for a base of %d bytes, applied to %d", src, len(base))
	}
	if dst > MaxObject {
		return nil, fmt.Errorf("a delta to %d bytes, over %d", dst, MaxObject)
	}
	out := make([]byte, 0, dst)
	for len(delta) > 0 {
		op := delta[0]
		delta = delta[1:]
		switch {
		case op&0x80 != 0:
			var off, size uint64
			for i := range 4 {
				if op&(1<<i) != 0 {
					if len(delta) == 0 {
						return nil, errors.New("a delta copy cut short")
					}
					off |= uint64(delta[0]) << (8 * i)
					delta = delta[1:]
				}
			}
			for i := range 3 {
				if op&(0x10<<i) != 0 {
					if len(delta) == 0 {
						return nil, errors.New("a delta copy cut short")
					}
					size |= uint64(delta[0]) << (8 * i)
					delta = delta[1:]
				}
			}
			if size == 0 {
				size = 0x10000
			}
			if off+size > uint64(len(base)) || uint64(len(out))+size > dst {
				return nil, fmt.Errorf("a delta copy of %d bytes at %d, outside its base or result", size, off)
			}
			out = append(out, base[off:off+size]...)
		case op != 0:
			if int(op) > len(delta) || uint64(len(out))+uint64(op) > dst {
				return nil, errors.New("a delta insert past its data or result")
			}
			out = append(out, delta[:op]...)
			delta = delta[op:]
		default:
			return nil, errors.New("a delta opcode 0 (reserved)")
		}
	}
	if uint64(len(out)) != dst {
		return nil, fmt.Errorf("a delta made %d bytes, promising %d", len(out), dst)
	}
	return out, nil
}

func deltaSize(b []byte) (uint64, int, error) {
	var v uint64
	for i, shift := 0, 0; i < len(b); i, shift = i+1, shift+7 {
		if shift > 56 {
			return 0, 0, errors.New("a delta size over 63 bits")
		}
		v |= uint64(b[i]&0x7f) << shift
		if b[i]&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errors.New("a delta size cut short")
}

// CheckCheckout compares the directory dir (a checkout, its .git
// beside the files and not compared) with commit id's tree: every file,
// executable bit, link and directory as the tree says, each file's
// content hashing to its blob's name, and nothing more.
func (r *Repo) CheckCheckout(id ID, dir string) error {
	t, err := r.CommitTree(id)
	if err != nil {
		return err
	}
	wt, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer wt.Close()
	return r.checkTree(t, wt, ".")
}

func (r *Repo) checkTree(t ID, wt *os.Root, dir string) error {
	es, err := r.Tree(t)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, e := range es {
		p := path.Join(dir, e.Name)
		want[e.Name] = true
		fi, err := wt.Lstat(p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		switch e.Mode {
		case ModeDir:
			if !fi.IsDir() {
				return fmt.Errorf("%s: the tree has a directory, the checkout a %s", p, fi.Mode().Type())
			}
			if err := r.checkTree(e.ID, wt, p); err != nil {
				return err
			}
		case ModeGitlink: // a submodule, not checked out: an empty directory
			if !fi.IsDir() {
				return fmt.Errorf("%s: the tree has a submodule, the checkout a %s", p, fi.Mode().Type())
			}
			if ents, err := fs.ReadDir(wt.FS(), p); err != nil || len(ents) > 0 {
				return fmt.Errorf("%s: a submodule's directory that is not empty", p)
			}
		case ModeLink:
			if fi.Mode().Type() != fs.ModeSymlink {
				return fmt.Errorf("%s: the tree has a link, the checkout a %s", p, fi.Mode().Type())
			}
			target, err := wt.Readlink(p)
			if err != nil {
				return err
			}
			if Name(Blob, []byte(target)) != e.ID {
				return fmt.Errorf("%s: the link's target is not the tree's", p)
			}
		default:
			if !fi.Mode().IsRegular() {
				return fmt.Errorf("%s: the tree has a file, the checkout a %s", p, fi.Mode().Type())
			}
			if exec := fi.Mode().Perm()&0o100 != 0; exec != (e.Mode == ModeExec) {
				return fmt.Errorf("%s: executable %v, the tree's mode %o", p, exec, e.Mode)
			}
			got, err := fileBlob(wt, p, fi.Size())
			if err != nil {
				return err
			}
			if got != e.ID {
				return fmt.Errorf("%s: its content hashes to blob %s, the tree's is %s", p, got, e.ID)
			}
		}
	}
	ents, err := fs.ReadDir(wt.FS(), dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if dir == "." && e.Name() == ".git" {
			continue
		}
		if !want[e.Name()] {
			return fmt.Errorf("%s: in the checkout, not in the tree", path.Join(dir, e.Name()))
		}
	}
	return nil
}

// fileBlob is the blob name of the file at p (size bytes).
func fileBlob(wt *os.Root, p string, size int64) (ID, error) {
	f, err := wt.Open(p)
	if err != nil {
		return ID{}, err
	}
	defer f.Close()
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", size)
	n, err := io.Copy(h, f)
	if err != nil {
		return ID{}, fmt.Errorf("%s: %w", p, err)
	}
	if n != size {
		return ID{}, fmt.Errorf("%s: changed while it was read", p)
	}
	var id ID
	h.Sum(id[:0])
	return id, nil
}
