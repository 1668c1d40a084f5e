package image

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"path"
	"runtime"
	"strings"

	"github.com/opensubstrate/sandbox/reject"
)

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform,omitempty"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	Manifests     []Descriptor `json:"manifests"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
	Manifests     []Descriptor `json:"manifests"` // set when it is an index
}

// Config is the part of an image's config that a run uses.
type Config struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Env        []string `json:"Env"`
		Entrypoint []string `json:"Entrypoint"`
		Cmd        []string `json:"Cmd"`
		WorkingDir string   `json:"WorkingDir"`
		User       string   `json:"User"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// dockerEntry is one image of a docker save archive's manifest.json.
type dockerEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// digest is a parsed "algorithm:hex" digest.
type digest struct{ alg, hex string }

func (d digest) String() string { return d.alg + ":" + d.hex }

func parseDigest(s, where string) (digest, error) {
	alg, h, ok := strings.Cut(s, ":")
	n := map[string]int{"sha256": 64, "sha512": 128}[alg]
	if !ok || n == 0 || len(h) != n || strings.ToLower(h) != h {
		return digest{}, reject.New(reject.Invalid, where, "%q is not a sha256 or sha512 digest", clip(s))
	}
	if _, err := hex.DecodeString(h); err != nil {
		return digest{}, reject.New(reject.Invalid, where, "%q is not a sha256 or sha512 digest", clip(s))
	}
	return digest{alg, h}, nil
}

func (d digest) hasher() hash.Hash {
	if d.alg == "sha512" {
		return sha512.New()
	}
	return sha256.New()
}

func (d digest) blob() string { return "blobs/" + d.alg + "/" + d.hex }

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// verifier hashes what is written to it; check compares the digest
// (and the size, when one is expected) once all is written.
type verifier struct {
	h    hash.Hash
	n    int64
	want digest
	size int64 // -1: any
	what string
}

func newVerifier(want digest, size int64, what string) *verifier {
	return &verifier{h: want.hasher(), want: want, size: size, what: what}
}

func (v *verifier) Write(b []byte) (int, error) {
	v.n += int64(len(b))
	return v.h.Write(b)
}

func (v *verifier) check() error {
	if v.size >= 0 && v.n != v.size {
		return reject.New(reject.Address, v.what, "%d bytes where the descriptor says %d", v.n, v.size)
	}
	if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want.hex {
		return reject.New(reject.Address, v.what, "its %s is %s, not %s: the bytes are not the ones named", v.want.alg, got[:16]+"…", v.want.hex[:16]+"…")
	}
	return nil
}

// readVerified reads a small blob and checks it against d.
func readVerified(s source, d Descriptor, where string) ([]byte, digest, error) {
	dg, err := parseDigest(d.Digest, where+".digest")
	if err != nil {
		return nil, dg, err
	}
	if d.Size > maxDoc {
		return nil, dg, reject.New(reject.Invalid, where, "%d bytes: more than %d", d.Size, maxDoc)
	}
	b, err := readSmall(s, dg.blob())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, dg, reject.New(reject.Missing, where, "blob %s is not in the layout", dg)
	}
	if err != nil {
		return nil, dg, err
	}
	v := newVerifier(dg, d.Size, where)
	v.Write(b)
	return b, dg, v.check()
}

// found is one image of a source, read and checked up to its layers.
type found struct {
	manifest string // its manifest's digest; "" for a docker save entry
	names    []string
	config   []byte
	configD  digest
	cfg      Config
	layers   []layerRef
}

// layerRef is where one layer is and what it must hash to.
type layerRef struct {
	name       string // in the source
	compressed digest // zero for a docker save layer (the archive names none)
	size       int64  // -1: unknown
	diffID     digest
}

// Media types of manifests and indexes, OCI and Docker's.
var (
	manifestTypes = map[string]bool{"application/vnd.oci.image.manifest.v1+json": true, "application/vnd.docker.distribution.manifest.v2+json": true}
	indexTypes    = map[string]bool{"application/vnd.oci.image.index.v1+json": true, "application/vnd.docker.distribution.manifest.list.v2+json": true}
)

// readSource finds the images in s: an OCI layout's (index.json), else a
// docker save archive's (manifest.json).
func readSource(s source) ([]found, error) {
	if _, err := readSmall(s, "oci-layout"); err == nil {
		idx, err := readSmall(s, "index.json")
		if err != nil {
			return nil, reject.New(reject.Missing, "index.json", "an OCI layout (it has oci-layout) without index.json: %v", err)
		}
		var ix index
		if err := strictJSON(idx, &ix); err != nil {
			return nil, reject.Wrap(reject.Malformed, "index.json", err)
		}
		var out []found
		for i, d := range ix.Manifests {
			f, err := readManifest(s, d, fmt.Sprintf("index.json manifests[%d]", i), 0)
			if err != nil {
				return nil, err
			}
			if f != nil {
				out = append(out, *f)
			}
		}
		if len(out) == 0 {
			return nil, reject.New(reject.Missing, "index.json", "no image for %s/%s", runtime.GOOS, runtime.GOARCH)
		}
		return out, nil
	}
	mb, err := readSmall(s, "manifest.json")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, reject.New(reject.Unrecognised, "source", "neither an OCI image layout (no oci-layout file) nor a docker save archive (no manifest.json)")
	}
	if err != nil {
		return nil, err
	}
	var entries []dockerEntry
	if err := strictJSON(mb, &entries); err != nil {
		return nil, reject.Wrap(reject.Malformed, "manifest.json", err)
	}
	if len(entries) == 0 {
		return nil, reject.New(reject.Missing, "manifest.json", "no image")
	}
	var out []found
	for i, e := range entries {
		f, err := readDocker(s, e, fmt.Sprintf("manifest.json[%d]", i))
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// readManifest reads the manifest (or index, up to depth 2) d names; nil
// when it is for another platform.
func readManifest(s source, d Descriptor, where string, depth int) (*found, error) {
	if d.Platform != nil && (d.Platform.OS != runtime.GOOS || d.Platform.Architecture != runtime.GOARCH) {
		return nil, nil
	}
	b, dg, err := readVerified(s, d, where)
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := strictJSON(b, &m); err != nil {
		return nil, reject.Wrap(reject.Malformed, where, err)
	}
	mt := m.MediaType
	if mt == "" {
		mt = d.MediaType
	}
	if indexTypes[mt] || (mt == "" && m.Manifests != nil) {
		if depth >= 2 {
			return nil, reject.New(reject.Invalid, where, "indexes nested more than twice")
		}
		for i, sub := range m.Manifests {
			f, err := readManifest(s, sub, fmt.Sprintf("%s manifests[%d]", where, i), depth+1)
			if f != nil || err != nil {
				if f != nil {
					f.names = append(f.names, names(d)...)
				}
				return f, err
			}
		}
		return nil, nil
	}
	if !manifestTypes[mt] && mt != "" {
		return nil, reject.New(reject.Unrecognised, where, "media type %q is not an image manifest", clip(mt))
	}
	cb, cd, err := readVerified(s, m.Config, where+" config")
	if err != nil {
		return nil, err
	}
	f := &found{manifest: dg.String(), names: names(d), config: cb, configD: cd}
	if err := f.parseConfig(where + " config"); err != nil {
		return nil, err
	}
	if len(m.Layers) != len(f.cfg.RootFS.DiffIDs) {
		return nil, reject.New(reject.Invalid, where, "%d layers but the config lists %d diff_ids", len(m.Layers), len(f.cfg.RootFS.DiffIDs))
	}
	for i, l := range m.Layers {
		lw := fmt.Sprintf("%s layers[%d]", where, i)
		ld, err := parseDigest(l.Digest, lw+".digest")
		if err != nil {
			return nil, err
		}
		diff, err := parseDigest(f.cfg.RootFS.DiffIDs[i], fmt.Sprintf("%s config rootfs.diff_ids[%d]", where, i))
		if err != nil {
			return nil, err
		}
		if l.Size < 0 {
			return nil, reject.New(reject.Invalid, lw+".size", "negative")
		}
		f.layers = append(f.layers, layerRef{name: ld.blob(), compressed: ld, size: l.Size, diffID: diff})
	}
	return f, nil
}

// names are the image names an index entry's annotations give.
func names(d Descriptor) []string {
	var out []string
	for _, k := range []string{"io.containerd.image.name", "org.opencontainers.image.ref.name"} {
		if v := d.Annotations[k]; v != "" {
			out = append(out, v)
		}
	}
	return out
}

func readDocker(s source, e dockerEntry, where string) (found, error) {
	f := found{names: e.RepoTags}
	cb, err := readSmall(s, e.Config)
	if errors.Is(err, fs.ErrNotExist) {
		return f, reject.New(reject.Missing, where+".Config", "%q is not in the archive", clip(e.Config))
	}
	if err != nil {
		return f, err
	}
	f.config = cb
	sum := sha256.Sum256(cb)
	f.configD = digest{"sha256", hex.EncodeToString(sum[:])}
	// A config named by its digest (as docker save names them) must be it.
	base := strings.TrimSuffix(path.Base(e.Config), ".json")
	if len(base) == 64 && base != f.configD.hex {
		if _, err := hex.DecodeString(base); err == nil {
			return f, reject.New(reject.Address, where+".Config", "%s hashes to sha256:%s…, not the digest in its name", clip(e.Config), f.configD.hex[:16])
		}
	}
	if err := f.parseConfig(where + ".Config"); err != nil {
		return f, err
	}
	if len(e.Layers) != len(f.cfg.RootFS.DiffIDs) {
		return f, reject.New(reject.Invalid, where, "%d layers but the config lists %d diff_ids", len(e.Layers), len(f.cfg.RootFS.DiffIDs))
	}
	for i, l := range e.Layers {
		diff, err := parseDigest(f.cfg.RootFS.DiffIDs[i], fmt.Sprintf("%s config rootfs.diff_ids[%d]", where, i))
		if err != nil {
			return f, err
		}
		f.layers = append(f.layers, layerRef{name: l, size: -1, diffID: diff})
	}
	return f, nil
}

func (f *found) parseConfig(where string) error {
	if err := json.Unmarshal(f.config, &f.cfg); err != nil {
		return reject.Wrap(reject.Malformed, where, err)
	}
	if f.cfg.RootFS.Type != "layers" {
		return reject.New(reject.Invalid, where+" rootfs.type", "%q, not \"layers\"", clip(f.cfg.RootFS.Type))
	}
	if f.cfg.OS != "" && f.cfg.OS != runtime.GOOS {
		return reject.New(reject.Invalid, where+" os", "an image for %q cannot run on %s", clip(f.cfg.OS), runtime.GOOS)
	}
	if f.cfg.Architecture != "" && f.cfg.Architecture != runtime.GOARCH {
		return reject.New(reject.Invalid, where+" architecture", "an image for %q cannot run on %s", clip(f.cfg.Architecture), runtime.GOARCH)
	}
	return nil
}

// strictJSON decodes one JSON value and nothing after it.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}
