package live

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
)

// TestAnExecInAReplacedGrantIsRefused: a live sandbox's session holds
// the directories its grants named when it opened. Where another run,
// given the parent read-write, moves a granted directory aside and puts
// another at its path, the host would find and read an exec's program in
// the new one while the run executes the old one's: the exec is refused,
// and the unit never names bytes that did not run (helper-57's finding).
func TestAnExecInAReplacedGrantIsRefused(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	dir, err := os.MkdirTemp("/var/tmp", "sandbox-grantid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	x := filepath.Join(dir, "x")
	if err := os.Mkdir(x, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(x, "tool"), []byte("#!/bin/sh\necho the old one\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t, "fs:"+x+":ro"), NoWorkspace: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Remove(info.ID, "") })
	if r, _ := execIn(t, h, info.ID, filepath.Join(x, "tool")); r.Result.Outcome.Status != "exited" {
		t.Fatalf("before: %+v", r.Result.Outcome)
	}
	g, err := grant.ParseArgs([]string{"fs:" + dir + ":rw"}, "/")
	if err != nil {
		t.Fatal(err)
	}
	req, err := host.Command(host.CommandLine{Args: []string{"/bin/sh", "-c", `mv "$1/x" "$1/x.old" && mkdir "$1/x" && printf '#!/bin/sh\necho the new one\n' > "$1/x/tool" && chmod 755 "$1/x/tool"`, "sh", dir}, Grants: g, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := h.Run(ctx, req); err != nil || r.Attestation.Claim.Outcome.Status != "exited" {
		t.Fatalf("the other run: %v", err)
	}
	_, err = h.Exec(ctx, info.ID, "", ExecRequest{Args: []string{filepath.Join(x, "tool")}})
	var ie *host.InvalidError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "another directory than the one the sandbox was given") {
		t.Fatalf("an exec after its grant was replaced: %v, want it refused", err)
	}
}
