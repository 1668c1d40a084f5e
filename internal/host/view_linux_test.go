package host

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinksAreFollowedAsTheRunFollowsThem: a program reached through
// links (ones a guest of an earlier run planted in a writable grant, or
// in a system directory runs may write) is the file the run will find,
// not the host's file of that name: the unit names the bytes that run.
// An absolute link leads, in an image, to the image's file; into the
// run's own /tmp, to nothing the host can read (refused); to a host path
// the run does not see, to nothing at all.
func TestLinksAreFollowedAsTheRunFollowsThem(t *testing.T) {
	t.Parallel()
	hostEnv, err := os.ReadFile("/usr/bin/env")
	if err != nil {
		t.Skipf("the host has no /usr/bin/env to link to: %v", err)
	}
	root := t.TempDir()
	imageEnv := []byte("#!/bin/sh\necho the image's env\n")
	mkfile(t, filepath.Join(root, "usr", "bin", "env"), imageEnv)
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	planted, other, notSeen := viewDir(t, "/var/tmp"), viewDir(t, "/var/tmp"), viewDir(t, "/var/tmp")
	hostTmp := filepath.Join(t.TempDir(), "x") // under /tmp: the run has its own
	mkfile(t, hostTmp, []byte("#!/bin/sh\necho the host's /tmp\n"))
	otherX := []byte("#!/bin/sh\necho another grant\n")
	mkfile(t, filepath.Join(other, "x"), otherX)
	mkfile(t, filepath.Join(notSeen, "x"), []byte("#!/bin/sh\necho not granted\n"))
	real := []byte("#!/bin/sh\necho real\n")
	mkfile(t, filepath.Join(planted, "sub", "real"), real)
	for name, target := range map[string]string{
		"env":    "/usr/bin/env",
		"binenv": "/bin/env",
		"dotdot": strings.Repeat("../", 8) + "usr/bin/env",
		"tmp":    hostTmp,
		"unseen": filepath.Join(notSeen, "x"),
		"other":  filepath.Join(other, "x"),
		"rel":    "sub/real",
		"loop":   "loop",
	} {
		if err := os.Symlink(target, filepath.Join(planted, name)); err != nil {
			t.Fatal(err)
		}
	}
	g := grants(t, "fs:"+planted+":rw", "fs:"+other+":ro")
	const (
		refusedTmp = "into the run's own /tmp"
		notFound   = "no such"
		loops      = "too many levels of symbolic links"
	)
	for _, tc := range []struct {
		name, rootDir string
		want          []byte // the bytes the unit must name
		err           string // or the refusal
	}{
		{"env", "", hostEnv, ""},
		{"binenv", "", hostEnv, ""},
		{"dotdot", "", hostEnv, ""},
		{"env", root, imageEnv, ""},
		{"binenv", root, imageEnv, ""},
		{"dotdot", root, imageEnv, ""},
		{"tmp", "", nil, refusedTmp},
		{"tmp", root, nil, refusedTmp},
		{"unseen", "", nil, notFound},
		{"unseen", root, nil, notFound},
		{"other", "", otherX, ""},
		{"other", root, otherX, ""},
		{"rel", "", real, ""},
		{"rel", root, real, ""},
		{"loop", "", nil, loops},
	} {
		for _, args := range [][]string{{filepath.Join(planted, tc.name)}, {tc.name}} {
			what := fmt.Sprintf("%v in the image %q", args, tc.rootDir)
			req, err := Command(CommandLine{Args: args, Cwd: "/", RootDir: tc.rootDir, Env: map[string]string{"PATH": planted}, Grants: g})
			if tc.err != "" {
				var pe *ProgramError
				if err == nil || !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.err) && !(args[0] == tc.name && pe.NotFound) {
					t.Errorf("%s: %v, bytes %q; want a ProgramError saying %q", what, err, req.Image, tc.err)
				}
				continue
			}
			if err != nil || !bytes.Equal(req.Image, tc.want) || req.Entry != filepath.Join(planted, tc.name) {
				t.Errorf("%s: entry %s, %d bytes (the run's: %v), %v", what, req.Entry, len(req.Image), bytes.Equal(req.Image, tc.want), err)
			}
		}
	}
}

// TestAReaderReadsOnlyWhatTheRunWillFind: a caller whose reads are
// checked (a service's tenant) reads a program in the system directories
// following the host's links, where it may read what they lead to; the
// unit is refused where the run will find another file there (a link in
// a directory runs may write, into the run's own /tmp).
func TestAReaderReadsOnlyWhatTheRunWillFind(t *testing.T) {
	t.Parallel()
	hostEnv, err := os.ReadFile("/usr/bin/env")
	if err != nil {
		t.Skipf("the host has no /usr/bin/env to link to: %v", err)
	}
	sys := viewDir(t, "/usr/local")
	if err := os.Chmod(sys, 0o755); err != nil { // as /opt/data would be
		t.Fatal(err)
	}
	hostTmp := filepath.Join(t.TempDir(), "x")
	mkfile(t, hostTmp, []byte("#!/bin/sh\necho the host's /tmp\n"))
	os.Symlink(hostTmp, filepath.Join(sys, "tmp"))
	os.Symlink("/usr/bin/env", filepath.Join(sys, "env"))
	anything := func(string) error { return nil }
	read := func(p string) ([]byte, error) { return readSystem(p, anything) }
	c := CommandLine{Cwd: "/", Read: read, Look: anything}
	c.Args = []string{filepath.Join(sys, "env")}
	if req, err := Command(c); err != nil || !bytes.Equal(req.Image, hostEnv) {
		t.Errorf("a link to /usr/bin/env: %v", err)
	}
	c.Args = []string{filepath.Join(sys, "tmp")}
	if req, err := Command(c); err == nil || !strings.Contains(err.Error(), "into the run's own /tmp") {
		t.Errorf("a link into /tmp: %v, %q; want refused", err, req.Image)
	}
}

func mkfile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
