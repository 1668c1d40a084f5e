package state

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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
		return key.Private{}, fmt.Errorf("state: key %s has mode %04o; it must not be readable by others (chmod 600 %s)", p, fi.Mode().Perm(), p)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return key.Private{}, fmt.Errorf("state: %w", err)
	}
	k, err := key.ParsePrivate(b)
	if err != nil {
		return key.Private{}, fmt.Errorf("state: key %s: %w", p, err)
	}
	return k, nil
}

// PrincipalsDir holds the named principal keys a person keeps on this
// machine (JCP: docs/spec/jcp.md §1), NAME.key, mode 0600.
const PrincipalsDir = "jcp/principals"

// ValidPrincipal says whether name may name a principal key: a lower-case
// letter or digit, then up to 63 of those, '.', '_' or '-'.
func ValidPrincipal(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return false
		}
	}
	return true
}

// ErrPrincipalExists refuses to make a principal key over another.
var ErrPrincipalExists = errors.New("a principal of that name exists")

// NewPrincipal makes the principal key name, refusing to replace one.
func (d *Dir) NewPrincipal(name string, rand io.Reader) (key.Private, error) {
	if !ValidPrincipal(name) {
		return key.Private{}, fmt.Errorf("principal name %q: use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit", name)
	}
	if err := os.MkdirAll(d.Path(PrincipalsDir), 0o700); err != nil {
		return key.Private{}, err
	}
	k, err := key.Generate(rand)
	if err != nil {
		return key.Private{}, err
	}
	p := d.Path(PrincipalsDir, name+".key")
	if err := safefile.Create(p, k.MarshalText(), 0o600); errors.Is(err, os.ErrExist) {
		return key.Private{}, fmt.Errorf("%w: %s", ErrPrincipalExists, p)
	} else if err != nil {
		return key.Private{}, err
	}
	return k, nil
}

// Principal is the principal key name.
func (d *Dir) Principal(name string) (key.Private, error) {
	if !ValidPrincipal(name) {
		return key.Private{}, fmt.Errorf("principal name %q is not a principal's name", name)
	}
	k, err := loadKey(d.Path(PrincipalsDir, name+".key"))
	if errors.Is(err, os.ErrNotExist) {
		return key.Private{}, fmt.Errorf("no principal %q here (make one with 'sandbox jcp principal new %s'): %w", name, name, err)
	}
	return k, err
}

// Principals are the names of the principal keys kept here, sorted.
func (d *Dir) Principals() ([]string, error) {
	es, err := os.ReadDir(d.Path(PrincipalsDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range es {
		if n, ok := strings.CutSuffix(e.Name(), ".key"); ok && ValidPrincipal(n) {
			out = append(out, n)
		}
	}
	return out, nil
}
