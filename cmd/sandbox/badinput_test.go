package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/record"
)

// TestBadInput: every bad input found by trying sandbox as a new user
// would gets a clear error that names what and where, with the exit
// status docs/cli.md gives, never an internal error or a silent
// acceptance.
func TestBadInput(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	dir := t.TempDir()
	hello := guestPath(t, "hello")
	textWasm := filepath.Join(dir, "x.wasm")
	os.WriteFile(textWasm, []byte("hello, not a module\n"), 0o644)
	img, err := os.ReadFile(hello)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "trunc.wasm")
	os.WriteFile(truncated, img[:100], 0o644)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("data"), 0o644)

	sandbox(t, home, "run", "-q", "--", hello)
	s1 := os.Geteuid() == 0
	if s1 {
		sandbox(t, home, "run", "-q", "--", "/bin/true") // last: an S1 run
	}

	for _, tc := range []struct {
		args   []string
		code   int
		want   string
		rootS1 bool // an S1 run: needs root here
	}{
		{[]string{"run", "--grant", "cpu:-1J", "--", hello}, 125, `grant "cpu:-1J": field budget: malformed energy: "-1J": "-1" is not a decimal number`, false},
		{[]string{"run", "--grant", "cpu:0J", "--", hello}, 125, `grant "cpu:0J": field budget: "0J" is zero`, false},
		{[]string{"run", "--grant", "gpu:5J", "--", hello}, 125, "asks for Gpu", false},
		{[]string{"run", "--grant", "fs:/:ro", "--", hello}, 125, "storage grant fs:/:ro: /: it contains sandbox's state directory", false},
		{[]string{"run", "--grant", "fs:" + file + ":ro", "--", hello}, 125, "storage grant fs:" + file + ":ro: " + file + " is not a directory: storage grants are directories", false},
		{[]string{"run", "--grant", "fs:" + file + ":ro", "--", "/bin/cat", file}, 125, "storage grant fs:" + file + ":ro: " + file + " is not a directory: storage grants are directories", true},
		{[]string{"run", "--", textWasm}, 126, textWasm + " is not a WebAssembly module", false},
		{[]string{"run", "--", truncated}, 126, "trunc.wasm (b3:", false},
		{[]string{"run", "--", "/nonexistent"}, 127, "/nonexistent: no such file", false},
		{[]string{"run", "--", "no-such-command-here"}, 127, "no-such-command-here: no such command in the run's PATH", false},
		{[]string{"run", "--", "/etc/passwd"}, 126, "/etc/passwd is not an executable file", false},
		{[]string{"run", "--memory", "1", "--", "/bin/true"}, 125, "--memory 1: below 16 MiB", false},
		{[]string{"run", "--pids", "0", "--", "/bin/true"}, 125, "--pids 0: want at least 2", false},
		{[]string{"run", "--cpus", "-1", "--", "/bin/true"}, 125, "--cpus -1: want a number of CPUs", false},
		{[]string{"run", "--deadline", "-1s", "--", "/bin/true"}, 125, "--deadline -1s: want a duration", false},
		{[]string{"run", "--tier", "S2", "--escalate", "--", "/bin/true"}, 125, "a native program cannot run at S2", false},
		{[]string{"run", "--bogus", "--", "/bin/true"}, 125, "unknown flag: --bogus", false},
		{[]string{"run", "--pids", "x", "--", "/bin/true"}, 125, `invalid argument "x" for "--pids"`, false},
		{[]string{"runs", "--bogus"}, 2, "unknown flag: --bogus", false},
		{[]string{"runs", "-n", "-1"}, 2, "-n -1: give a number of runs, or 0 for all", false},
		{[]string{"manifest", "/nonexistent.json"}, 3, "/nonexistent.json", false},
		{[]string{"manifest", file}, 2, "line 1, column 1: invalid character 'd'", false},
		{[]string{"manifest", textWasm}, 2, "line 1, column 1", false},
		{[]string{"verify", "abcdef123"}, 3, `no run "abcdef123"`, false},
		{[]string{"show", dir}, 3, dir + " is not a run directory: it holds no attestation.json", false},
		{[]string{"show", "ab"}, 3, "at least 6 hex digits", false},
		{[]string{"replay", "last"}, 7, "S1 runs are not replayable", true},
		// The live-sandbox commands: bad arguments are refused before a
		// service is looked for; with none, they say so.
		{[]string{"exec", "sb-000000000000"}, 125, "requires at least 2 arg(s)", false},
		{[]string{"exec", "--deadline", "-1s", "sb-000000000000", "--", "true"}, 125, "--deadline: want a duration above zero", false},
		{[]string{"exec", "--env", "NOEQUALS", "sb-000000000000", "--", "true"}, 125, `--env "NOEQUALS": want NAME=VALUE`, false},
		{[]string{"create", "--env", "=x"}, 2, `--env "=x": want NAME=VALUE`, false},
		{[]string{"create", "--memory", "lots"}, 2, "--memory", false},
		{[]string{"create", "--grant", "cpu:-1J"}, 2, `grant "cpu:-1J"`, false},
		{[]string{"create", "--inject", "h:X=env:Y"}, 2, "not taken by live sandboxes yet", false},
		{[]string{"create"}, 7, "no sandbox service is running", false},
		{[]string{"ps"}, 7, "no sandbox service is running", false},
		{[]string{"exec", "sb-000000000000", "--", "true"}, 125, "no sandbox service is running", false},
		{[]string{"rm", "sb-000000000000"}, 7, "no sandbox service is running", false},
		{[]string{"cp", file, file}, 2, "want exactly one side as SANDBOX:/path", false},
		{[]string{"cp", "sb-000000000000:/a", "sb-000000000000:/b"}, 2, "want exactly one side as SANDBOX:/path", false},
		{[]string{"ls", "/tmp"}, 2, `"/tmp": want SANDBOX:/path`, false},
		{[]string{"serve", "--listen", "127.0.0.1:0"}, 2, "--listen needs --tls-cert, --tls-key and --token-file", false},
		{[]string{"serve", "--log-format", "xml"}, 2, `--log-format "xml"`, false},
		{[]string{"serve", "--ui"}, 2, "--ui needs --listen (with --tls-cert, --tls-key and --token-file)", false},
		{[]string{"serve", "--blobs", "s3://b?endpoint=http://127.0.0.1:1"}, 2, "--blobs is where a cluster keeps suspended sandboxes: it needs --cluster", false},
		{[]string{"serve", "--token-file", "/nonexistent", "--listen", "127.0.0.1:0", "--tls-cert", file, "--tls-key", file}, 2, "--token-file", false},
	} {
		if tc.rootS1 && !s1 {
			continue
		}
		out, errOut, code := sandbox(t, home, tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("%q: exit %d (want %d)\n%s%s(want %q)", tc.args, code, tc.code, out, errOut, tc.want)
		}
		if strings.Contains(errOut, "internal") || strings.Contains(errOut, "panic") {
			t.Errorf("%q: %s", tc.args, errOut)
		}
	}
}

// TestBadRecordsAndManifests: the verifiers' bad inputs each get their
// reject code and the exit status of the one category map: a record
// naming a run that is not here, a devcontainer.json over its bound.
func TestBadRecordsAndManifests(t *testing.T) {
	t.Parallel()
	home, dir := t.TempDir(), t.TempDir()
	hb, _ := jcs.Marshal(record.Header{Record: record.Domain, Unit: addr.Of([]byte("u")), Grants: addr.Of([]byte("g"))})
	run := addr.Of([]byte("a run not here"))
	sb, _ := record.Segment{Kind: record.Executed, Attestation: run}.Bytes()
	rec := filepath.Join(dir, "r.jsonl")
	os.WriteFile(rec, []byte(string(hb)+"\n"+string(sb)+"\n"), 0o600)
	out, errOut, code := sandbox(t, home, "record", "verify", "--runs", "--json", rec)
	var got struct{ Code, Error string }
	json.Unmarshal([]byte(out), &got)
	if code != 4 || got.Code != "missing" || !strings.Contains(got.Error, run.String()) {
		t.Errorf("a record naming a run not here: exit %d %s %s", code, out, errOut)
	}
	big := filepath.Join(dir, "devcontainer.json")
	os.WriteFile(big, append([]byte(`{"image":"a"}`), bytes.Repeat([]byte(" "), 1<<20)...), 0o644)
	for _, args := range [][]string{{"manifest", big}, {"manifest", "-"}} {
		cmd := cliCmd(t, home, nil, args...)
		f, _ := os.Open(big)
		cmd.Stdin = f
		var e bytes.Buffer
		cmd.Stderr = &e
		err := cmd.Run()
		f.Close()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(e.String(), "devcontainer.json: more than 1048576 bytes (1 MiB), the bound") {
			t.Errorf("%v over 1 MiB: %v %s", args, err, e.String())
		}
	}
}

// TestAmbiguousPrefixListsCandidates: a run prefix that matches several
// runs is refused with every candidate named.
func TestAmbiguousPrefixListsCandidates(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	runs := filepath.Join(home, "runs")
	os.MkdirAll(runs, 0o700)
	// Two run directories whose names share 8 digits (damaged, as they
	// hold nothing: listed all the same).
	a, b := "abcdef01"+strings.Repeat("0", 56), "abcdef01"+strings.Repeat("1", 56)
	for _, n := range []string{a, b} {
		os.Mkdir(filepath.Join(runs, n), 0o700)
	}
	_, errOut, code := sandbox(t, home, "show", "abcdef01")
	if code == 0 || !strings.Contains(errOut, "matches 2 runs") || !strings.Contains(errOut, a) || !strings.Contains(errOut, b) {
		t.Fatalf("exit %d %s", code, errOut)
	}
}

// TestReadOnlyStateDir: a state directory that cannot be written is
// said to be one, with how to choose another.
func TestReadOnlyStateDir(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a read-only bind mount needs root")
	}
	home := t.TempDir()
	if _, e, code := sandbox(t, home, "run", "-q", "--", guestPath(t, "hello")); code != 0 {
		t.Fatal(e)
	}
	if err := unix.Mount(home, home, "", unix.MS_BIND, ""); err != nil {
		t.Skip(err)
	}
	defer unix.Unmount(home, unix.MNT_DETACH)
	if err := unix.Mount("", home, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"run", "--", "/bin/true"}, {"run", "--", guestPath(t, "hello")}} {
		_, errOut, code := sandbox(t, home, args...)
		if code != 125 || !strings.Contains(errOut, "the state directory "+home+" cannot be written (read-only file system)") {
			t.Errorf("%v: exit %d %s", args, code, errOut)
		}
	}
	// Reading still works.
	if out, _, code := sandbox(t, home, "runs"); code != 0 || !strings.Contains(out, "exited 0") {
		t.Errorf("runs on a read-only state directory: %d %s", code, out)
	}
}
