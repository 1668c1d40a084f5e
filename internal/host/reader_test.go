package host

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/opensubstrate/sandbox/internal/authority"
)

// TestReaderReadsOnlyWhatTheCallerMay: a tenant's reader refuses a file
// it may not read however the path reaches it: named directly, through a
// system directory and "..", or through a link planted in a directory of
// the system directories that runs may write (an operator's /opt/data);
// the system's own programs and their links it reads.
func TestReaderReadsOnlyWhatTheCallerMay(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make a directory under /opt")
	}
	secret := filepath.Join(t.TempDir(), "secret.wasm")
	if err := os.WriteFile(secret, []byte("\x00asm\x01\x00\x00\x00 another tenant's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("/opt", 0o755); err != nil {
		t.Fatal(err)
	}
	opt, err := os.MkdirTemp("/opt", "sandbox-test-")
	if err != nil {
		t.Skipf("no directory of our own under /opt: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(opt) })
	planted := filepath.Join(opt, "planted.wasm")
	if err := os.Symlink(secret, planted); err != nil {
		t.Fatal(err)
	}
	sh := filepath.Join(opt, "sh")
	if err := os.Symlink("/bin/sh", sh); err != nil {
		t.Fatal(err)
	}
	read := (&Host{}).Reader(context.Background(), "mallory", "run")
	for _, p := range []string{secret, "/usr/.." + secret, "/usr/../" + secret[1:], planted} {
		if b, err := read(p); !errors.As(err, new(*authority.DeniedError)) {
			t.Errorf("%s: read %d bytes, err %v; want it denied", p, len(b), err)
		}
	}
	for _, p := range []string{"/bin/true", sh} {
		b, err := read(p)
		want, _ := os.ReadFile(p)
		if err != nil || !bytes.Equal(b, want) || len(b) == 0 {
			t.Errorf("%s: %d bytes, %v; want its %d", p, len(b), err, len(want))
		}
	}
	// Through Command, as a service makes a run: refused, not read.
	if _, err := Command(CommandLine{Args: []string{"/usr/.." + secret}, Cwd: "/", Read: read}); !errors.As(err, new(*authority.DeniedError)) {
		t.Errorf("a run of /usr/..%s: %v, want it denied", secret, err)
	}
}
