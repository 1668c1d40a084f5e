package vectors

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	gojcs "github.com/gowebpki/jcs"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/verify"
)

// Outcome is the check of one vector.
type Outcome struct {
	Entry Entry
	Got   string // "ok" or the reject code of the first failure
	Err   error  // the first failure, if any
	Pass  bool
	Why   string // when !Pass
}

// Write generates the pack into dir, creating directories as needed. Files
// already there with other names are left alone.
func Write(dir string) (int, error) {
	files, err := Generate()
	if err != nil {
		return 0, err
	}
	return writeFiles(dir, files)
}

// writeFiles writes a generated pack's files into dir.
func writeFiles(dir string, files map[string][]byte) (int, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return 0, err
		}
		if err := safefile.Write(p, files[n], 0o644); err != nil {
			return 0, err
		}
	}
	return len(names), nil
}

// Verify checks the pack in dir: every file is the one the manifest
// pins (CheckFiles), then every positive verifies under the published
// test key with its stated address, and every negative fails with its
// stated code. The pack's manifest must name the published key. A pack
// whose files are not the pinned ones is refused whole (the error).
func Verify(dir string) ([]Outcome, error) {
	mb, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := jcs.Unmarshal(mb, &m); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	if m.Type != ManifestType {
		return nil, fmt.Errorf("manifest.json: type %q, want %q", m.Type, ManifestType)
	}
	if m.TrustedKey != TestKey().Public() {
		return nil, fmt.Errorf("manifest.json: trusted key %s is not the published test key %s", m.TrustedKey, TestKey().Public())
	}
	if err := CheckFiles(dir, m); err != nil {
		return nil, err
	}
	v := &verify.Verifier{Trust: key.NewTrust(TestKey().Public())}
	var out []Outcome
	for _, e := range m.Entries {
		out = append(out, check(v, dir, e))
	}
	return out, nil
}

// CheckFiles checks the pack in dir against the files its manifest m
// pins: each is there (missing) and hashes to its address (address),
// nothing else is in the pack but the manifest (unrecognised), and every
// vector's path is a pinned file or a directory of them (missing). The
// paths are the manifest's, read as untrusted: clean, relative, in order.
func CheckFiles(dir string, m Manifest) error {
	if len(m.Files) == 0 {
		return reject.New(reject.MissingField, "manifest.json: files", "a pack pins its files")
	}
	pinned := map[string]bool{}
	for i, f := range m.Files {
		where := fmt.Sprintf("manifest.json: files[%d]", i)
		switch {
		case f.Path == "" || path.Clean(f.Path) != f.Path || path.IsAbs(f.Path) || f.Path == ".." || strings.HasPrefix(f.Path, "../") || f.Path == ManifestFile:
			return reject.New(reject.Invalid, where, "%q is not a clean relative path of a file of the pack", f.Path)
		case i > 0 && m.Files[i-1].Path >= f.Path:
			return reject.New(reject.NonCanonical, where, "files are in order of their paths, each once")
		}
		pinned[f.Path] = true
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if errors.Is(err, fs.ErrNotExist) {
			return reject.New(reject.Missing, f.Path, "the manifest pins it at %s, and it is not in the pack", f.Addr)
		}
		if err != nil {
			return err
		}
		if got := addr.Of(b); got != f.Addr {
			return reject.New(reject.Address, f.Path, "hashes to %s, the manifest pins %s", got, f.Addr)
		}
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel = filepath.ToSlash(rel); rel != ManifestFile && !pinned[rel] {
			return reject.New(reject.Unrecognised, rel, "a file in the pack that its manifest does not pin")
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range m.Entries {
		if pinned[e.Path] {
			continue
		}
		i := sort.Search(len(m.Files), func(i int) bool { return m.Files[i].Path > e.Path+"/" })
		if i == len(m.Files) || !strings.HasPrefix(m.Files[i].Path, e.Path+"/") {
			return reject.New(reject.Missing, e.Path, "a vector whose files the manifest does not pin")
		}
	}
	return nil
}

func check(v *verify.Verifier, dir string, e Entry) Outcome {
	o := Outcome{Entry: e, Got: ExpectOK}
	p := filepath.Join(dir, filepath.FromSlash(e.Path))
	var results []verify.Result
	switch e.Kind {
	case "addresses":
		results = []verify.Result{checkAddresses(p)}
	case KindEd25519JCS:
		results = []verify.Result{checkPlain(p)}
	case KindDurable:
		r := verify.Result{Path: p, Kind: KindDurable}
		if b, err := os.ReadFile(p); err != nil {
			r.Err = err
		} else if err := CheckDurable(b); err != nil {
			r.Err = reject.Wrap(reject.Invalid, "", err)
		}
		results = []verify.Result{r}
	case KindFleet:
		r := verify.Result{Path: p, Kind: KindFleet}
		if b, err := os.ReadFile(p); err != nil {
			r.Err = err
		} else if err := CheckFleet(b); err != nil {
			r.Err = reject.Wrap(reject.Invalid, "", err)
		}
		results = []verify.Result{r}
	case KindEnvironment:
		r := verify.Result{Path: p, Kind: KindEnvironment}
		if b, err := os.ReadFile(p); err != nil {
			r.Err = err
		} else if err := CheckEnvironment(b); err != nil {
			r.Err = reject.Wrap(reject.Invalid, "", err)
		}
		results = []verify.Result{r}
	case KindRecordRuns:
		results = []verify.Result{checkRecordRuns(v, p)}
	case KindJCP:
		r := verify.Result{Path: p, Kind: KindJCP}
		if b, err := os.ReadFile(p); err != nil {
			r.Err = err
		} else if err := CheckJCP(b); err != nil {
			r.Err = reject.Wrap(reject.Invalid, "", err)
		}
		results = []verify.Result{r}
	case KindLocality:
		r := verify.Result{Path: p, Kind: KindLocality}
		if b, err := os.ReadFile(p); err != nil {
			r.Err = err
		} else if err := CheckLocality(b); err != nil {
			r.Err = reject.Wrap(reject.Invalid, "", err)
		}
		results = []verify.Result{r}
	case KindEvidence:
		r := verify.Result{Path: p, Kind: KindEvidence}
		if b, err := os.ReadFile(p); err != nil {
			r.Err = err
		} else if err := CheckEvidence(b); err != nil {
			r.Err = reject.Wrap(reject.Invalid, "", err)
		}
		results = []verify.Result{r}
	case KindEncoding:
		r := verify.Result{Path: p, Kind: KindEncoding}
		if b, err := os.ReadFile(p); err != nil {
			r.Err = err
		} else if err := CheckEncoding(b); err != nil {
			r.Err = reject.Wrap(reject.Address, "", err)
		}
		results = []verify.Result{r}
	default:
		results = v.Path(p)
	}
	for _, r := range results {
		if r.Err != nil {
			o.Err = fmt.Errorf("%s: %w", r.Path, r.Err)
			o.Got = string(reject.CodeOf(r.Err))
			if o.Got == "" {
				o.Got = "error"
			}
			break
		}
	}
	switch {
	case o.Got != e.Expect:
		o.Why = fmt.Sprintf("got %s, want %s", o.Got, e.Expect)
	case e.Addr != nil && len(results) > 0 && results[0].Addr != *e.Addr:
		o.Why = fmt.Sprintf("address %s, manifest says %s", results[0].Addr, *e.Addr)
	case e.Kind != "run" && e.Kind != "addresses" && e.Kind != KindEd25519JCS && e.Kind != KindEncoding && e.Kind != KindDurable && e.Kind != KindEnvironment && e.Kind != KindFleet && e.Kind != KindRecordRuns && e.Kind != KindJCP && e.Kind != KindLocality && e.Kind != KindEvidence && len(results) > 0 && results[0].Kind != e.Kind:
		o.Why = fmt.Sprintf("recognised as %s, manifest says %s", results[0].Kind, e.Kind)
	default:
		o.Pass = true
	}
	return o
}

// checkPlain checks the plain Ed25519-over-JCS vector the way a verifier
// that knows nothing of this project would: RFC 8785 by the reference
// implementation (gowebpki/jcs), RFC 8032 by crypto/ed25519.
func checkPlain(p string) verify.Result {
	r := verify.Result{Path: p, Kind: KindEd25519JCS}
	b, err := os.ReadFile(p)
	if err != nil {
		r.Err = err
		return r
	}
	var v PlainVector
	if err := json.Unmarshal(b, &v); err != nil {
		r.Err = reject.Wrap(reject.Malformed, "", err)
		return r
	}
	msg, err := gojcs.Transform(v.Claim)
	if err != nil {
		r.Err = reject.Wrap(reject.Malformed, "claim", err)
		return r
	}
	pub, err1 := hex.DecodeString(v.PublicKey)
	sig, err2 := hex.DecodeString(v.Signature)
	if err1 != nil || err2 != nil || len(pub) != ed25519.PublicKeySize {
		r.Err = reject.New(reject.Malformed, "", "public_key_hex and signature_hex are hex, the key 32 bytes")
		return r
	}
	if !ed25519.Verify(pub, msg, sig) {
		r.Err = reject.New(reject.Signature, "signature_hex", "Ed25519 over JCS(claim) does not verify")
		return r
	}
	r.Addr = addr.Of(msg)
	r.Note = "Ed25519 over JCS(claim) verifies"
	return r
}

func checkAddresses(p string) verify.Result {
	r := verify.Result{Path: p, Kind: "addresses"}
	b, err := os.ReadFile(p)
	if err != nil {
		r.Err = err
		return r
	}
	var vs []AddressVector
	if err := jcs.Unmarshal(b, &vs); err != nil {
		r.Err = err
		return r
	}
	for i, av := range vs {
		in, err := hex.DecodeString(av.Input)
		if err != nil {
			r.Err = reject.New(reject.Malformed, fmt.Sprintf("[%d].input_hex", i), "%v", err)
			return r
		}
		if got := addr.Of(in); !bytes.Equal(got[:], av.Address[:]) {
			r.Err = reject.New(reject.Address, fmt.Sprintf("[%d]", i), "input hashes to %s, vector says %s", got, av.Address)
			return r
		}
	}
	r.Note = fmt.Sprintf("%d address vectors", len(vs))
	return r
}
