package gitobj

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repo makes a repository with two commits on main (a file, an
// executable, a link, a directory), packed with deltas when pack is
// set; it returns its directory and the two commits.
func repo(t testing.TB, pack bool) (string, string, string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed (scripts/deps installs it)")
	}
	dir := t.TempDir()
	g := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	g("init", "-q", "-b", "main")
	big := strings.Repeat("a line that repeats, so that the second version is a delta\n", 200)
	os.WriteFile(filepath.Join(dir, "README"), []byte(big), 0o644)
	os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "deeper", "f"), []byte("f\n"), 0o644)
	os.Symlink("sub/deeper/f", filepath.Join(dir, "link"))
	g("add", ".")
	g("commit", "-q", "-m", "first")
	first := g("rev-parse", "HEAD")
	os.WriteFile(filepath.Join(dir, "README"), []byte(big+"and one more\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "sub", "g"), []byte("g\n"), 0o644)
	g("add", ".")
	g("commit", "-q", "-m", "second")
	second := g("rev-parse", "HEAD")
	if pack {
		g("gc", "-q", "--aggressive")
		if _, err := os.Stat(filepath.Join(dir, ".git", "refs", "heads", "main")); err == nil {
			t.Fatal("gc left the ref loose")
		}
	}
	return dir, first, second
}

// TestReadsBranchesObjectsAndCheckouts: loose and packed (deltas, packed
// refs) alike, the branch's commit is read from the refs, every object
// read is checked against its name, and the checkout verifies against
// the branch's commit and not against another.
func TestReadsBranchesObjectsAndCheckouts(t *testing.T) {
	for _, packed := range []bool{false, true} {
		t.Run(fmt.Sprintf("packed=%v", packed), func(t *testing.T) {
			dir, first, second := repo(t, packed)
			r, err := Open(filepath.Join(dir, ".git"))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			head, err := r.Branch("main")
			if err != nil || head.String() != second {
				t.Fatalf("main: %s %v, want %s", head, err, second)
			}
			if _, err := r.Branch("nope"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("a missing branch: %v", err)
			}
			if err := r.CheckCheckout(head, dir); err != nil {
				t.Fatalf("the checkout: %v", err)
			}
			old, _ := ParseID(first)
			if err := r.CheckCheckout(old, dir); err == nil {
				t.Fatal("the checkout verified against the first commit")
			}
			var missing ID
			missing[0] = 1
			if _, _, err := r.Read(missing); !errors.Is(err, ErrNotFound) {
				t.Fatalf("a missing object: %v", err)
			}
		})
	}
}

// TestCheckoutMismatchesAreNamed: every way a checkout can differ from
// its commit's tree is refused, naming the path.
func TestCheckoutMismatchesAreNamed(t *testing.T) {
	for name, c := range map[string]struct {
		mut  func(dir string)
		want string
	}{
		"a changed file": {func(d string) { os.WriteFile(filepath.Join(d, "sub", "g"), []byte("G\n"), 0o644) }, "sub/g"},
		"an extra file":  {func(d string) { os.WriteFile(filepath.Join(d, "sub", "deeper", "x"), nil, 0o644) }, "sub/deeper/x"},
		"a missing file": {func(d string) { os.Remove(filepath.Join(d, "run.sh")) }, "run.sh"},
		"an exec bit":    {func(d string) { os.Chmod(filepath.Join(d, "run.sh"), 0o644) }, "run.sh"},
		"a link retargets": {func(d string) {
			os.Remove(filepath.Join(d, "link"))
			os.Symlink("/etc/passwd", filepath.Join(d, "link"))
		}, "link"},
		"a link for a file": {func(d string) {
			os.Remove(filepath.Join(d, "README"))
			os.Symlink("/etc/passwd", filepath.Join(d, "README"))
		}, "README"},
	} {
		t.Run(name, func(t *testing.T) {
			dir, _, second := repo(t, true)
			c.mut(dir)
			r, err := Open(filepath.Join(dir, ".git"))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			id, _ := ParseID(second)
			if err := r.CheckCheckout(id, dir); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want an error naming %s", err, c.want)
			}
		})
	}
}

// TestObjectsAreCheckedAgainstTheirNames: a loose object whose content is
// not its name's, a ref that names no commit, a ref that is a symbolic
// one, and a SHA-256 repository are refused.
func TestObjectsAreCheckedAgainstTheirNames(t *testing.T) {
	dir, first, second := repo(t, false)
	gd := filepath.Join(dir, ".git")
	// The first commit's loose file holding the second's content.
	b, _ := os.ReadFile(filepath.Join(gd, "objects", second[:2], second[2:]))
	p := filepath.Join(gd, "objects", first[:2], first[2:])
	os.Chmod(p, 0o644)
	os.WriteFile(p, b, 0o644)
	r, err := Open(gd)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := ParseID(first)
	if _, _, err := r.Read(id); err == nil || !strings.Contains(err.Error(), "hashes to "+second) {
		t.Fatalf("a swapped object: %v", err)
	}
	r.Close()
	os.WriteFile(filepath.Join(gd, "refs", "heads", "main"), []byte("ref: refs/heads/other\n"), 0o644)
	r, _ = Open(gd)
	if _, err := r.Branch("main"); err == nil || !strings.Contains(err.Error(), "symbolic") {
		t.Fatalf("a symbolic ref: %v", err)
	}
	r.Close()
	os.WriteFile(filepath.Join(gd, "config"), []byte("[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectFormat = sha256\n"), 0o644)
	if _, err := Open(gd); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("a SHA-256 repository: %v", err)
	}
}

func FuzzParseTree(f *testing.F) {
	var id [20]byte
	f.Add(append([]byte("100644 README\x00"), id[:]...))
	f.Add(append(append([]byte("40000 d\x00"), id[:]...), append([]byte("120000 l\x00"), id[:]...)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := ParseTree(b)
		if err != nil {
			return
		}
		var again []byte
		for _, e := range es {
			again = append(again, fmt.Sprintf("%o %s\x00", e.Mode, e.Name)...)
			again = append(again, e.ID[:]...)
		}
		if len(again) > len(b) {
			t.Fatalf("%d entries re-encode to %d bytes from %d", len(es), len(again), len(b))
		}
	})
}

func FuzzApplyDelta(f *testing.F) {
	f.Add([]byte("hello, world"), []byte{12, 5, 0x90, 5})
	f.Add([]byte("abc"), []byte{3, 4, 2, 'x', 'y', 0x91, 1, 2})
	f.Fuzz(func(t *testing.T, base, delta []byte) {
		out, err := ApplyDelta(base, delta)
		if err == nil && len(out) > MaxObject {
			t.Fatalf("%d bytes", len(out))
		}
	})
}

func FuzzReadLoose(f *testing.F) {
	loose := func(s string) []byte {
		var b bytes.Buffer
		z := zlib.NewWriter(&b)
		z.Write([]byte(s))
		z.Close()
		return b.Bytes()
	}
	f.Add(loose("blob 3\x00hi\n"))
	f.Add(loose("commit 5\x00tree "))
	f.Fuzz(func(t *testing.T, b []byte) {
		kind, data, err := readLoose(bytes.NewReader(b))
		if err == nil && (!validKind(kind) || len(data) > MaxObject) {
			t.Fatalf("%q %d", kind, len(data))
		}
	})
}

func FuzzPackIndexAndEntries(f *testing.F) {
	dir, _, _ := repo(f, true)
	packs, _ := filepath.Glob(filepath.Join(dir, ".git", "objects", "pack", "*.idx"))
	for _, p := range packs {
		idx, _ := os.ReadFile(p)
		pk, _ := os.ReadFile(strings.TrimSuffix(p, ".idx") + ".pack")
		f.Add(idx, pk)
	}
	f.Add([]byte("\xfftOc\x00\x00\x00\x02"), []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x01\x30\x78\x9c\x03\x00\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, idx, pk []byte) {
		d := t.TempDir()
		os.MkdirAll(filepath.Join(d, "objects", "pack"), 0o755)
		os.WriteFile(filepath.Join(d, "objects", "pack", "p.idx"), idx, 0o644)
		os.WriteFile(filepath.Join(d, "objects", "pack", "p.pack"), pk, 0o644)
		r, err := Open(d)
		if err != nil {
			return
		}
		defer r.Close()
		for _, p := range r.packs {
			for i := 0; i < len(p.names)/20 && i < 64; i++ {
				var id ID
				copy(id[:], p.names[20*i:])
				r.Read(id)
			}
		}
	})
}
