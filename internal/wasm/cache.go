package wasm

import (
	"bytes"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/zeebo/blake3"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/fuel"
	"github.com/opensubstrate/sandbox/internal/safefile"
)

// CacheKeyContext is the key derivation context of the caches' MAC key,
// derived from the host key (key.Private.Derive).
const CacheKeyContext = "sandbox 2026-12 compiled-code cache MAC v1"

// mac is a keyed BLAKE3 MAC over length-prefixed parts, so that no two
// sequences of parts share an input.
func mac(k [32]byte, parts ...[]byte) [32]byte {
	h, _ := blake3.NewKeyed(k[:])
	var n [8]byte
	for _, p := range parts {
		binary.LittleEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// The instrumented cache: each file is the MAC, then the instrumented
// module. The MAC binds the bytes to the source module's address and the
// instrumenter's version, under the host's key: a file that was changed,
// or written by anyone without the key, or made for another source, does
// not verify and is discarded.
const instrumentedTag = "sandbox.instrumented/1"

func (e *Executor) instrumentedPath(a addr.Addr) string {
	return filepath.Join(e.cfg.CacheDir, "instrumented", fuel.Version+"-"+a.Hex()+".wasm")
}

func (e *Executor) instrumentedMAC(a addr.Addr, inst []byte) [32]byte {
	return mac(e.cfg.CacheKey, []byte(instrumentedTag), []byte(fuel.Version), a[:], inst)
}

// loadInstrumented returns the cached instrumentation of the module at
// address a, or nil; a file that does not verify is removed, with a
// warning.
func (e *Executor) loadInstrumented(a addr.Addr) []byte {
	p := e.instrumentedPath(a)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	if len(b) >= 32 {
		want := e.instrumentedMAC(a, b[32:])
		if subtle.ConstantTimeCompare(b[:32], want[:]) == 1 {
			return b[32:]
		}
	}
	os.Remove(p)
	e.warn(fmt.Sprintf("discarded the cached instrumentation %s: it does not carry this host's MAC for module %s (changed, or not written by this host); instrumenting again", p, a))
	return nil
}

func (e *Executor) storeInstrumented(a addr.Addr, inst []byte) {
	p := e.instrumentedPath(a)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return
	}
	m := e.instrumentedMAC(a, inst)
	safefile.Write(p, append(m[:], inst...), 0o600) // a cache: failing to keep it is not an error
}

func (e *Executor) warn(msg string) {
	if e.cfg.Warn != nil {
		e.cfg.Warn(msg)
	}
}

// The compiled cache is wazero's: machine code the host maps and runs.
// wazero checks its entries with a CRC only, so each entry gets a sidecar,
// ENTRY.mac, holding the keyed MAC of its name and bytes and the identity
// it had when sealed (inode, size, change time). Before wazero may read
// the directory (each compile that is not already in memory), every entry
// is checked: an identity that still matches is trusted (a change to the
// file would have changed its change time), anything else is hashed and
// must match its MAC; an entry without a valid sidecar is removed, with a
// warning, and wazero compiles afresh. New entries are sealed after the
// compile that wrote them. A lock file serialises this between processes.
const compiledTag = "sandbox.compiled/1"

// sidecar layout: magic, inode, size, ctime (ns), content MAC, MAC of the
// preceding bytes.
var sidecarMagic = []byte("SBXC1\x00\x00\x00")

const sidecarLen = 8 + 8 + 8 + 8 + 32 + 32

type entryID struct {
	ino, size uint64
	ctime     int64
}

// compiledCache is the sealed view of wazero's cache directory.
type compiledCache struct {
	dir  string
	key  [32]byte
	warn func(string)
}

func (c *compiledCache) contentMAC(name string, r io.Reader) ([32]byte, error) {
	h, _ := blake3.NewKeyed(c.key[:])
	var n [8]byte
	for _, p := range [][]byte{[]byte(compiledTag), []byte(name)} {
		binary.LittleEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	if _, err := io.Copy(h, r); err != nil {
		return [32]byte{}, err
	}
	var out [32]byte
	h.Sum(out[:0])
	return out, nil
}

func (c *compiledCache) encode(id entryID, sum [32]byte) []byte {
	b := make([]byte, 0, sidecarLen)
	b = append(b, sidecarMagic...)
	b = binary.LittleEndian.AppendUint64(b, id.ino)
	b = binary.LittleEndian.AppendUint64(b, id.size)
	b = binary.LittleEndian.AppendUint64(b, uint64(id.ctime))
	b = append(b, sum[:]...)
	m := mac(c.key, []byte(compiledTag+" sidecar"), b)
	return append(b, m[:]...)
}

// decode returns a sidecar's identity and content MAC, if its own MAC holds.
func (c *compiledCache) decode(b []byte) (entryID, [32]byte, bool) {
	var sum [32]byte
	if len(b) != sidecarLen || !bytes.Equal(b[:8], sidecarMagic) {
		return entryID{}, sum, false
	}
	m := mac(c.key, []byte(compiledTag+" sidecar"), b[:sidecarLen-32])
	if subtle.ConstantTimeCompare(m[:], b[sidecarLen-32:]) != 1 {
		return entryID{}, sum, false
	}
	id := entryID{ino: binary.LittleEndian.Uint64(b[8:]), size: binary.LittleEndian.Uint64(b[16:]), ctime: int64(binary.LittleEndian.Uint64(b[24:]))}
	copy(sum[:], b[32:64])
	return id, sum, true
}

// entries lists the cache's entry files (not sidecars, temporary files or
// the lock), by path.
func (c *compiledCache) entries() ([]string, error) {
	var out []string
	err := filepath.WalkDir(c.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		n := d.Name()
		if d.IsDir() || strings.HasSuffix(n, ".mac") || strings.HasSuffix(n, ".tmp") || n == lockName {
			return nil
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

const lockName = ".lock"

// dropTemps removes the temporary files wazero leaves when a write into
// the cache fails (a full disk). Called under the lock, when no compile
// can be writing one.
func (c *compiledCache) dropTemps() {
	filepath.WalkDir(c.dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(d.Name(), ".tmp") {
			os.Remove(p)
		}
		return nil
	})
}

// check verifies every entry, removing what does not verify; with seal,
// it seals every entry that has no sidecar yet instead (the entries the
// compile just made: under the lock, nothing else can have made them).
func (c *compiledCache) check(seal bool) error {
	files, err := c.entries()
	if err != nil {
		return err
	}
	for _, p := range files {
		rel, _ := filepath.Rel(c.dir, p)
		id, ok := identity(p)
		if !ok {
			continue
		}
		side, serr := os.ReadFile(p + ".mac")
		if seal && errors.Is(serr, fs.ErrNotExist) {
			c.seal(p, rel, id)
			continue
		}
		sid, sum, valid := c.decode(side)
		if valid && sid == id {
			continue
		}
		if valid {
			// Same MAC key, another identity (copied, restored): the
			// content decides.
			if f, err := os.Open(p); err == nil {
				got, herr := c.contentMAC(rel, f)
				f.Close()
				if herr == nil && subtle.ConstantTimeCompare(got[:], sum[:]) == 1 {
					safefile.Write(p+".mac", c.encode(id, sum), 0o600)
					continue
				}
			}
		}
		os.Remove(p)
		os.Remove(p + ".mac")
		c.warn(fmt.Sprintf("discarded the compiled-code cache entry %s: it does not carry this host's MAC (changed, or not written by this host); its module will be compiled again", p))
	}
	return nil
}

func (c *compiledCache) seal(p, rel string, id entryID) {
	f, err := os.Open(p)
	if err != nil {
		return
	}
	sum, err := c.contentMAC(rel, f)
	f.Close()
	if err != nil {
		return
	}
	safefile.Write(p+".mac", c.encode(id, sum), 0o600)
}
