package state

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/key"
)

// EnvHome is the environment variable that overrides the state directory.
const EnvHome = "SANDBOX_HOME"

// Default returns the state directory: $SANDBOX_HOME, else
// $XDG_STATE_HOME/sandbox, else $HOME/.local/state/sandbox. getenv is
// os.Getenv in production.
func Default(getenv func(string) string) (string, error) {
	if d := getenv(EnvHome); d != "" {
		return filepath.Abs(d)
	}
	if d := getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "sandbox"), nil
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "state", "sandbox"), nil
	}
	return "", fmt.Errorf("state: no state directory: set %s", EnvHome)
}

// Dir is an opened state directory.
type Dir struct {
	Root string
}

// Open makes the state directory if needed (mode 0700) and returns it.
func Open(root string) (*Dir, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	return &Dir{Root: root}, nil
}

// Path returns a path inside the state directory.
func (d *Dir) Path(elem ...string) string {
	return filepath.Join(append([]string{d.Root}, elem...)...)
}

// HostKey returns the host key, making it from rand on first use.
func (d *Dir) HostKey(rand io.Reader) (key.Private, error) {
	p := d.Path("host.key")
	k, err := loadKey(p)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return k, err
	}
	nk, err := key.Generate(rand)
	if err != nil {
		return key.Private{}, err
	}
	if err := safefile.Create(p, nk.MarshalText(), 0o600); err != nil && !errors.Is(err, os.ErrExist) {
		return key.Private{}, fmt.Errorf("state: create host key: %w", err)
	}
	// Another process may have won the race: use whatever is on disk.
	if k, err = loadKey(p); err != nil {
		return key.Private{}, err
	}
	pub := []byte(k.Public().String() + "\n")
	if err := safefile.Write(d.Path("host.pub"), pub, 0o644); err != nil {
		return key.Private{}, err
	}
	return k, nil
}

func loadKey(p string) (key.Private, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return key.Private{}, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return key.Private{}, fmt.Errorf("state: host key %s has mode %04o; it must not be readable by others (chmod 600 %s)", p, fi.Mode().Perm(), p)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return key.Private{}, fmt.Errorf("state: %w", err)
	}
	k, err := key.ParsePrivate(b)
	if err != nil {
		return key.Private{}, fmt.Errorf("state: host key %s: %w", p, err)
	}
	return k, nil
}
