package server

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/verify"
)

// TestRunBundleVerifiesOffline: a client far from the service fetches a
// run's sealed files (GET /v1/runs/{id}/bundle) and the host's key (GET
// /v1/key) and verifies the run with nothing else; one file changed on
// the way is caught. A run nobody may see is 404. A suspended sandbox
// is found by its id, as the list shows it; an empty list of pools and
// a sandbox without grants are arrays.
func TestRunBundleVerifiesOffline(t *testing.T) {
	_, _, c := serve(t)
	ctx := context.Background()
	var out bytes.Buffer
	res, err := c.Run(ctx, client.ExecSpec{Args: []string{"/bin/echo", "bundled"}}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	k, err := c.HostKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := key.ParsePublic(k)
	if err != nil {
		t.Fatal(err)
	}
	var tb bytes.Buffer
	if err := c.RunBundle(ctx, res.Run, &tb); err != nil {
		t.Fatal(err)
	}
	dir := untar(t, tb.Bytes())
	rs, err := verify.Dir(dir, pub)
	if err != nil || len(rs) == 0 {
		t.Fatalf("verify: %v %v", rs, err)
	}
	for _, r := range rs {
		if r.Err != nil {
			t.Fatalf("%s: %v", r.Path, r.Err)
		}
	}
	os.WriteFile(filepath.Join(dir, "stdout.log"), []byte("forged\n"), 0o600)
	bad := false
	rs, _ = verify.Dir(dir, pub)
	for _, r := range rs {
		bad = bad || r.Err != nil
	}
	if !bad {
		t.Fatal("a changed output verified")
	}
	if err := c.RunBundle(ctx, "b3:"+strings.Repeat("ab", 32), io.Discard); status(err) != 404 {
		t.Fatalf("a run that is not there: %v", err)
	}
	sb, err := c.Create(ctx, client.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.State != "suspended" || got.Grants == nil {
		t.Fatalf("a suspended sandbox by its id: %+v %v", got, err)
	}
	pools, err := c.Pools(ctx)
	if err != nil || pools == nil {
		t.Fatalf("pools: %#v %v", pools, err)
	}
}

// untar writes a run bundle's files into a directory of their own.
func untar(t *testing.T, b []byte) string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	dir := ""
	for {
		hd, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(hd.Name, "/")
		if len(parts) != 3 || parts[0] != "runs" {
			t.Fatalf("an entry %q", hd.Name)
		}
		if dir == "" {
			dir = filepath.Join(t.TempDir(), parts[1])
			os.Mkdir(dir, 0o700)
		}
		data, _ := io.ReadAll(tr)
		os.WriteFile(filepath.Join(dir, parts[2]), data, 0o600)
	}
	return dir
}
