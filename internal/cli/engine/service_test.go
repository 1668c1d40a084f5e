package engine

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/opensubstrate/sandbox/internal/volume"
)

// TestServeSizeFlags: --workspace-max, --output-max and
// --workspace-pool read sizes; a workspace bound of 0 is none, one under
// the least is refused, an output bound is above zero, and a pool is
// auto or at least volume.MinPool.
func TestServeSizeFlags(t *testing.T) {
	for _, c := range []struct {
		flag, v string
		least   int64
		want    int64
		ok      bool
	}{
		{"--workspace-max", "10GiB", volume.MinSize, 10 << 30, true},
		{"--workspace-max", "0", volume.MinSize, -1, true},
		{"--workspace-max", "1MiB", volume.MinSize, 0, false},
		{"--workspace-max", "lots", volume.MinSize, 0, false},
		{"--output-max", "64MiB", 0, 64 << 20, true},
		{"--output-max", "0", 0, 0, false},
	} {
		got, err := sizeFlag(c.flag, c.v, c.least)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("%s %s: %d %v", c.flag, c.v, got, err)
		}
	}
	for _, c := range []struct {
		v    string
		want int64
		ok   bool
	}{
		{"auto", 0, true},
		{"64GiB", 64 << 30, true},
		{"512MiB", volume.MinPool, true},
		{"100MiB", 0, false},
		{"0", 0, false},
		{"lots", 0, false},
	} {
		got, err := poolSize(c.v)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("--workspace-pool %s: %d %v", c.v, got, err)
		}
	}
}

// TestListenUnixIsPrivateWithoutTheUmask: the service's socket is 0600
// from before anyone could connect, made without touching the process's
// umask (a run started meanwhile inherits it); a socket that answers is
// refused, one left by an ended service is replaced, and nothing of the
// making is left beside it.
func TestListenUnixIsPrivateWithoutTheUmask(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "serve.sock")
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	ln, err := listenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := syscall.Umask(0o022); m != 0o022 {
		t.Errorf("listenUnix left the umask %#o", m)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the socket: %v %v", fi.Mode(), err)
	}
	go func(ln net.Listener) {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}(ln)
	if _, err := listenUnix(path); err == nil || !strings.Contains(err.Error(), "already serving") {
		t.Errorf("a second service on a socket that answers: %v", err)
	}
	ln.Close() // the file stays, as a killed service's would
	ln, err = listenUnix(path)
	if err != nil {
		t.Fatalf("replacing a stale socket: %v", err)
	}
	defer ln.Close()
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("left beside the socket: %v", ents)
	}
}
