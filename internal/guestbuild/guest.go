package guestbuild

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/vm/boot"
)

// Root returns the repository root (the directory holding go.mod).
func Root() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("guest: cannot locate the source tree")
	}
	return filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Go builds the Go guest guests/NAME and returns the module's path.
func Go(name string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	src := filepath.Join(root, "guests", name)
	key, err := sourceKey(src, runtime.Version())
	if err != nil {
		return "", err
	}
	return cached("go-"+name, key, func(out string) error {
		cmd := exec.Command("go", "build", "-trimpath", "-o", out, ".")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("guest: go build %s: %v\n%s", name, err, b)
		}
		return nil
	})
}

// Native builds the Go guest guests/NAME for this host (static, no cgo),
// for native (S1) runs, and returns the binary's path.
func Native(name string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	src := filepath.Join(root, "guests", name)
	key, err := sourceKey(src, runtime.Version()+runtime.GOOS+runtime.GOARCH)
	if err != nil {
		return "", err
	}
	return cached("native-"+name, key, func(out string) error {
		cmd := exec.Command("go", "build", "-o", out, ".")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("guest: go build %s: %v\n%s", name, err, b)
		}
		return nil
	})
}

// S1Helper builds cmd/sandbox-s1, the small helper S1 runs start as
// their init, and returns its path.
func S1Helper() (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	var key strings.Builder
	for _, d := range []string{"cmd/sandbox-s1", "internal/native/s1init", "internal/confine"} {
		k, err := sourceKey(filepath.Join(root, d), runtime.Version())
		if err != nil {
			return "", err
		}
		key.WriteString(k)
	}
	return cached("native-sandbox-s1", addr.Of([]byte(key.String())).Short(), func(out string) error {
		cmd := exec.Command("go", "build", "-o", out, "./cmd/sandbox-s1")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("guest: go build sandbox-s1: %v\n%s", err, b)
		}
		return nil
	})
}

// Clang is the C compiler C guests are built with.
const Clang = "clang-14"

// C builds the C guest guests/c/NAME.c and returns the module's path.
func C(name string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	cc, err := exec.LookPath(Clang)
	if err != nil {
		return "", fmt.Errorf("guest: %s is not installed; run scripts/deps (Debian: clang-14 lld-14 wasi-libc libclang-rt-14-dev-wasm32)", Clang)
	}
	src := filepath.Join(root, "guests", "c", name+".c")
	b, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	key := addr.Of(append(b, []byte(cc)...)).Short()
	return cached("c-"+name, key, func(out string) error {
		cmd := exec.Command(cc, "--target=wasm32-wasi", "--sysroot=/usr", "-fuse-ld=lld", "-O2", "-Wl,--strip-debug", "-o", out, src)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("guest: %s %s: %v\n%s", Clang, name, err, b)
		}
		return nil
	})
}

// sourceKey hashes every file of a Go guest with the toolchain version.
func sourceKey(dir, toolchain string) (string, error) {
	var all bytes.Buffer
	all.WriteString(toolchain)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&all, "%s\x00%d\x00", e.Name(), len(b))
		all.Write(b)
	}
	return addr.Of(all.Bytes()).Short(), nil
}

func cached(name, key string, build func(out string) error) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "sandbox-guests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	final := filepath.Join(dir, name+"-"+key+".wasm")
	if strings.HasPrefix(name, "native-") {
		final = filepath.Join(dir, name+"-"+key)
	}
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "out.wasm")
	if err := build(out); err != nil {
		return "", err
	}
	// The compiler's file is renamed into place, not written again here:
	// a program a parallel test starts meanwhile would inherit a file this
	// process held open for writing, and executing the guest would fail
	// with ETXTBSY until that program execs. Synced through a read-only
	// descriptor, which nobody can be refused for.
	if err := syncFile(out); err != nil {
		return "", err
	}
	if err := os.Chmod(out, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(out, final); err != nil {
		return "", err
	}
	return final, nil
}

// syncFile makes p's bytes durable through a read-only descriptor.
func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Install builds the guest name with build and puts a copy at dst with
// mode (a set-id bit included). The copy is written by cp(1), a child
// process, never by this one: see cached on ETXTBSY.
func Install(tb testing.TB, build func(string) (string, error), name, dst string, mode os.FileMode) {
	tb.Helper()
	p, err := build(name)
	if err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command("cp", p, dst).CombinedOutput(); err != nil {
		tb.Fatalf("copying guest %s: %v: %s", name, err, out)
	}
	if err := os.Chmod(dst, mode); err != nil {
		tb.Fatal(err)
	}
}

// Read builds the guest name with build (Go, C, Native) and returns its
// bytes; a failure ends the test.
func Read(tb testing.TB, build func(string) (string, error), name string) []byte {
	tb.Helper()
	p, err := build(name)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// VMAgent builds cmd/sandbox-vmagent, the init of S5 guests, and returns
// its path.
func VMAgent() (string, error) {
	return goProgram("sandbox-vmagent", "./cmd/sandbox-vmagent", "cmd/sandbox-vmagent", "internal/vm/agent", "internal/vm/wire")
}

// VMInit builds internal/vm/testdata/inits/NAME, a stand-in for the
// guest agent that misbehaves in one way (tests of S5's bad input).
func VMInit(name string) (string, error) {
	d := "internal/vm/testdata/inits/" + name
	return goProgram("vminit-"+name, "./"+d, d)
}

// FakeFirecracker builds internal/vm/testdata/fakefc, the stand-in for
// a firecracker binary (see its doc).
func FakeFirecracker() (string, error) {
	return goProgram("fakefc", "./internal/vm/testdata/fakefc", "internal/vm/testdata/fakefc", "internal/vm/firecracker/apischema", "internal/vm/boot")
}

// goProgram builds the static program pkg, cached by the sources of dirs.
func goProgram(name, pkg string, dirs ...string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	var key strings.Builder
	for _, d := range dirs {
		k, err := sourceKey(filepath.Join(root, d), runtime.Version())
		if err != nil {
			return "", err
		}
		key.WriteString(k)
	}
	return cached("native-"+name, addr.Of([]byte(key.String())).Short(), func(out string) error {
		cmd := exec.Command("go", "build", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", out, pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("guest: go build %s: %v\n%s", pkg, err, b)
		}
		return nil
	})
}

// VMKernel is the unpacked Debian kernel package scripts/vm-image
// fetches.
func VMKernel() (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	d := filepath.Join(root, ".cache", "vm", "linux")
	if _, err := os.Stat(filepath.Join(d, ".done")); err != nil {
		return "", fmt.Errorf("guest: no guest kernel in %s: run scripts/vm-image (scripts/deps does)", d)
	}
	return d, nil
}

// DefaultVMImage builds the S5 guest image with the project's agent and
// returns its directory.
func DefaultVMImage() (string, error) {
	agent, err := VMAgent()
	if err != nil {
		return "", err
	}
	return VMImage(agent)
}

// VMImage builds an S5 guest image whose init is the program at agent
// (VMAgent's, or a VMInit stand-in) and returns its directory, cached.
func VMImage(agent string) (string, error) {
	k, err := VMKernel()
	if err != nil {
		return "", err
	}
	ab, err := os.ReadFile(agent)
	if err != nil {
		return "", err
	}
	kb, _ := os.ReadFile(filepath.Join(k, ".done"))
	bb := filepath.Join(filepath.Dir(k), "busybox", "bin", "busybox")
	if _, err := os.Stat(bb); err != nil {
		return "", fmt.Errorf("guest: no busybox in %s: run scripts/vm-image (scripts/deps does)", bb)
	}
	kb = append(kb, []byte("busybox")...)
	root, err := Root()
	if err != nil {
		return "", err
	}
	bk, err := sourceKey(filepath.Join(root, "internal", "vm", "boot"), "") // its module list, its command line
	if err != nil {
		return "", err
	}
	kb = append(kb, bk...)
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "sandbox-guests", "vm-"+addr.Of(append(ab, kb...)).Short())
	if _, err := boot.Open(dir); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".vm-")
	if err != nil {
		return "", err
	}
	if _, err := boot.Build(k, agent, bb, tmp); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if _, oerr := boot.Open(dir); oerr == nil {
			return dir, nil // another builder's
		}
		return "", err
	}
	os.Chmod(dir, 0o755)
	return dir, nil
}
