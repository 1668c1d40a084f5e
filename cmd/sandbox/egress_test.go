package main

import (
	"archive/zip"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEgressRealTools runs git, pip, npm and curl in S1 against a server
// on the host's loopback that only the egress proxy can reach, with
// nothing but the proxy settings the run is given.
func TestEgressRealTools(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 as tested here runs as root (the CI machines' user)")
	}
	for _, tool := range []string{"git", "curl", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (scripts/deps installs it)", tool)
		}
	}
	if _, err := os.Stat("/usr/bin/pip3"); err != nil {
		t.Fatal("/usr/bin/pip3 is missing (scripts/deps installs python3-pip)")
	}
	root := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.FileServer(http.Dir(root))}}
	srv.Start()
	defer srv.Close()

	// A git repository over git's dumb HTTP protocol.
	work := filepath.Join(root, "work")
	gitRun := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	os.MkdirAll(work, 0o755)
	os.WriteFile(filepath.Join(work, "README"), []byte("fetched through the egress proxy\n"), 0o644)
	gitRun(work, "init", "-q")
	gitRun(work, "add", ".")
	gitRun(work, "commit", "-qm", "one")
	gitRun(root, "clone", "-q", "--bare", work, "repo.git")
	gitRun(filepath.Join(root, "repo.git"), "update-server-info")

	// A Python package index with one wheel.
	os.MkdirAll(filepath.Join(root, "simple", "sbxdemo"), 0o755)
	whl := "sbxdemo-0.1-py3-none-any.whl"
	writeWheel(t, filepath.Join(root, "simple", "sbxdemo", whl))
	os.WriteFile(filepath.Join(root, "simple", "sbxdemo", "index.html"), []byte(`<a href="`+whl+`">`+whl+`</a>`), 0o644)

	// An npm registry document.
	os.MkdirAll(filepath.Join(root, "npm"), 0o755)
	os.WriteFile(filepath.Join(root, "npm", "sbxdemo"), []byte(`{"name":"sbxdemo","dist-tags":{"latest":"1.2.3"},"versions":{"1.2.3":{"name":"sbxdemo","version":"1.2.3","dist":{"tarball":"`+base+`/npm/sbxdemo-1.2.3.tgz"}}}}`), 0o644)

	home := t.TempDir()
	script := strings.Join([]string{
		"set -e",
		"cd /tmp",
		"git clone -q " + base + "/repo.git r && cat r/README",
		"pip3 download -q --no-deps --index-url " + base + "/simple -d dl sbxdemo && ls dl",
		"npm view --registry " + base + "/npm/ sbxdemo version",
		"curl -sS " + base + "/npm/sbxdemo | head -c 18; echo",
	}, "\n")
	out, errOut, code := sandbox(t, home, "run", "-q", "--grant", "net:"+ln.Addr().String(), "--", "sh", "-c", script)
	want := "fetched through the egress proxy\n" + whl + "\n1.2.3\n" + `{"name":"sbxdemo",` + "\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d\nstdout %q\nwant   %q\nstderr %s", code, out, want, errOut)
	}
	show, _, _ := sandbox(t, home, "show", "last")
	if !strings.Contains(show, "allow net connect "+ln.Addr().String()) {
		t.Fatalf("show:\n%s", show)
	}
}

// writeWheel writes a minimal, valid pure-Python wheel.
func writeWheel(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z := zip.NewWriter(f)
	files := map[string]string{
		"sbxdemo/__init__.py":            "",
		"sbxdemo-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: sbxdemo\nVersion: 0.1\n",
		"sbxdemo-0.1.dist-info/WHEEL":    "Wheel-Version: 1.0\nGenerator: sandbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	var record strings.Builder
	for _, name := range []string{"sbxdemo/__init__.py", "sbxdemo-0.1.dist-info/METADATA", "sbxdemo-0.1.dist-info/WHEEL"} {
		w, _ := z.Create(name)
		w.Write([]byte(files[name]))
		fmt.Fprintf(&record, "%s,,\n", name)
	}
	record.WriteString("sbxdemo-0.1.dist-info/RECORD,,\n")
	w, _ := z.Create("sbxdemo-0.1.dist-info/RECORD")
	w.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
}
