//go:build linux

package s1init

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestScriptArg(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv string
		want string
	}{
		{"sh", "sh x.sh a", "x.sh"},
		{"sh", "sh -c whoami", ""},
		{"dash", "dash -ec whoami", ""},
		{"bash", "bash -x -o pipefail run.sh", "run.sh"},
		{"bash", "bash --norc -- run.sh", "run.sh"},
		{"sh", "sh -", ""},
		{"sh", "sh", ""},
		{"python3", "python3 -u -W ignore x.py", "x.py"},
		{"python3.11", "python3.11 -c pass", ""},
		{"python3", "python3 -m http.server", ""},
		{"python3", "python3 -Ic pass", ""},
		{"perl", "perl -w x.pl", "x.pl"},
		{"perl", "perl -e 1", ""},
		{"node", "node --require r.js app.js", "app.js"},
		{"node", "node --eval 1", ""},
		{"php", "php -f x.php", "x.php"},
		{"awk", "awk -f prog.awk data", "prog.awk"},
		{"awk", "awk {print} data", ""},
		{"ld-linux-x86-64.so.2", "ld.so --library-path /x ./prog", "./prog"},
		{"env", "env whoami", ""},
		{"pythonista", "pythonista x.py", ""},
		{"whoami", "whoami", ""},
	} {
		if got := scriptArg(tc.name, strings.Fields(tc.argv)); got != tc.want {
			t.Errorf("%s %q: %q, want %q", tc.name, tc.argv, got, tc.want)
		}
	}
}

func TestShebangAndLoader(t *testing.T) {
	dir := t.TempDir()
	s := filepath.Join(dir, "s")
	os.WriteFile(s, []byte("#!/usr/bin/env python3 -u\nprint(1)\n"), 0o755)
	fd, err := unix.Open(s, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if i, ok := shebang(fd); !ok || i != "/usr/bin/env" {
		t.Errorf("shebang: %q %v", i, ok)
	}
	if l := elfInterp(fd); l != "" {
		t.Errorf("a script has a loader: %q", l)
	}
	bin, err := unix.Open("/usr/bin/whoami", unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(bin)
	if l := elfInterp(bin); !strings.Contains(l, "ld-linux") {
		t.Errorf("loader of whoami: %q", l)
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\`: `/x\`, `/t\011\134`: "/t\t\\"} {
		if got := unescapeMount(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// FuzzExecFile feeds hostile files (a guest writes them) to what exec
// control reads of a file: the #! line and the ELF loader.
func FuzzExecFile(f *testing.F) {
	f.Add([]byte("#!/bin/sh\n"))
	f.Add([]byte("#!"))
	f.Add([]byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x3e\x00"))
	if b, err := os.ReadFile("/usr/bin/true"); err == nil {
		f.Add(b[:4096])
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(p, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		shebang(fd)
		elfInterp(fd)
	})
}

// FuzzScriptArg feeds guest-chosen argument vectors.
func FuzzScriptArg(f *testing.F) {
	f.Add("python3", "python3\x00-W\x00x\x00a.py")
	f.Add("sh", "sh\x00--\x00")
	f.Add("ld-linux-x86-64.so.2", "ld\x00--preload")
	f.Fuzz(func(t *testing.T, name, argv string) {
		got := scriptArg(name, strings.Split(argv, "\x00"))
		if got != "" && !strings.Contains(argv, got) {
			t.Fatalf("%q is not an argument of %q", got, argv)
		}
	})
}
