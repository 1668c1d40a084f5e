package live

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// ranItem is a fleet item run on one host (ItemOf, RunItem): its
// result and the bundle its host hands back.
func ranItem(t *testing.T, ran *Manager, who string) (ItemResult, []byte) {
	t.Helper()
	req := host.Request{Kind: tier.Wasm, Image: image(t, "hello"), Entry: "hello", Args: []string{"hello", who}, Grants: grants(t),
		Notes: []string{"item 3 of fleet fl-test"}}
	p, err := ItemOf("fl-test", 3, req)
	if err != nil {
		t.Fatal(err)
	}
	res, b, err := ran.RunItem(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// TestFleetItemTravels: an item made on one host runs on another, sealed
// under that host's key, and its run comes back whole: kept on the
// fleet's host once it verifies under the runner's key, with the exit
// status its own attestation says.
func TestFleetItemTravels(t *testing.T) {
	ran, back := newHost(t), newHost(t)
	res, b := ranItem(t, ran, "fleet")
	if res.Type != ItemResultType || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("result: %+v", res)
	}
	exit, err := back.ImportRun(bytes.NewReader(b), res.Run, key.NewTrust(ran.Key.Public()))
	if err != nil || exit == nil || *exit != 0 {
		t.Fatalf("import: %v %v", exit, err)
	}
	dir := back.Store.Path("runs", res.Run.Hex())
	for _, r := range verifyRun(t, ran, dir) {
		if r.Err != nil {
			t.Fatalf("the kept run: %s: %v", r.Path, r.Err)
		}
	}
	out, _ := os.ReadFile(filepath.Join(dir, host.FileStdout))
	if !strings.Contains(string(out), "fleet") {
		t.Fatalf("its output: %q", out)
	}
	// Again: a run already here is left as it is.
	if _, err := back.ImportRun(bytes.NewReader(b), res.Run, key.NewTrust(ran.Key.Public())); err != nil {
		t.Fatal(err)
	}
	if rows, _ := back.Store.Runs(); len(rows) != 1 || rows[0].ID != res.Run {
		t.Fatalf("the index: %+v", rows)
	}
}

// TestImportRunRefusesHostileBundles: a run handed back is hostile bytes
// from another host. A signer nobody trusts, a run not the one asked
// for, a tampered output, names that climb or name another run, a link,
// too many files: each refused naming what, and nothing left in runs/.
func TestImportRunRefusesHostileBundles(t *testing.T) {
	ran := newHost(t)
	res, good := ranItem(t, ran, "hostile")
	other, _ := ranItem(t, ran, "other")
	hex := res.Run.Hex()
	trusted := key.NewTrust(ran.Key.Public())
	files := readTar(t, good)
	rebuild := func(edit func(name string, b []byte) (string, []byte, byte)) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, f := range files {
			name, data, typ := edit(f.name, f.data)
			if name == "" {
				continue
			}
			hd := &tar.Header{Name: name, Mode: 0o600, Size: int64(len(data)), Typeflag: typ}
			if typ == tar.TypeSymlink {
				hd.Size, hd.Linkname, data = 0, "/etc/passwd", nil
			}
			tw.WriteHeader(hd)
			tw.Write(data)
		}
		tw.Close()
		return buf.Bytes()
	}
	same := func(n string, b []byte) (string, []byte, byte) { return n, b, tar.TypeReg }
	many := func() []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for i := range maxRunFiles + 1 {
			name := string(rune('a'+i%26)) + string(rune('a'+i/26)) // distinct, as a run's names are: letters
			tw.WriteHeader(&tar.Header{Name: "runs/" + hex + "/" + name + ".log", Mode: 0o600, Typeflag: tar.TypeReg})
		}
		tw.Close()
		return buf.Bytes()
	}
	for _, c := range []struct {
		name   string
		bundle []byte
		want   addr.Addr
		trust  key.Trust
		says   string
	}{
		{"untrusted signer", good, res.Run, key.NewTrust(newHost(t).Key.Public()), "trust"},
		{"another run than asked", good, other.Run, trusted, "not a file of run"},
		{"tampered output", rebuild(func(n string, b []byte) (string, []byte, byte) {
			if strings.HasSuffix(n, host.FileStdout) {
				return n, []byte("forged\n"), tar.TypeReg
			}
			return same(n, b)
		}), res.Run, trusted, "stdout"},
		{"no attestation", rebuild(func(n string, b []byte) (string, []byte, byte) {
			if strings.HasSuffix(n, "attestation.json") {
				return "", nil, 0
			}
			return same(n, b)
		}), res.Run, trusted, "no attestation.json"},
		{"a name that climbs", rebuild(func(n string, b []byte) (string, []byte, byte) {
			return "runs/" + hex + "/../../x.json", b, tar.TypeReg
		}), res.Run, trusted, "only runs/HEX/NAME"},
		{"a link", rebuild(func(n string, b []byte) (string, []byte, byte) {
			if strings.HasSuffix(n, host.FileStdout) {
				return n, nil, tar.TypeSymlink
			}
			return same(n, b)
		}), res.Run, trusted, "regular files"},
		{"a file twice", rebuild(func(n string, b []byte) (string, []byte, byte) {
			if strings.HasSuffix(n, "unit.json") {
				return "runs/" + hex + "/grants.json", b, tar.TypeReg
			}
			return same(n, b)
		}), res.Run, trusted, "twice"},
		{"too many files", many(), res.Run, trusted, "more than"},
		{"not a tar", []byte("not a tar at all, but long enough to be read as a header block by the reader"), res.Run, trusted, "run bundle"},
	} {
		t.Run(c.name, func(t *testing.T) {
			back := newHost(t)
			_, err := back.ImportRun(bytes.NewReader(c.bundle), c.want, c.trust)
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("want a refusal saying %q, got %v", c.says, err)
			}
			var rj *reject.Error
			if !errors.As(err, &rj) && !strings.Contains(err.Error(), "trust") {
				t.Errorf("not a named refusal: %v", err)
			}
			if ents, _ := os.ReadDir(back.Store.Path("runs")); len(ents) != 0 {
				t.Fatalf("left in runs/: %v", ents)
			}
		})
	}
}

type tarFile struct {
	name string
	data []byte
}

func readTar(t *testing.T, b []byte) []tarFile {
	t.Helper()
	var out []tarFile
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hd, err := tr.Next()
		if err != nil {
			break
		}
		var buf bytes.Buffer
		buf.ReadFrom(tr)
		out = append(out, tarFile{hd.Name, buf.Bytes()})
	}
	if len(out) == 0 {
		t.Fatal("an empty bundle")
	}
	return out
}

// TestItemsThatDoNotTravel: what only the fleet's host has is refused
// by ItemOf (such an item runs there). A token's principal travels, and
// the host that runs its item holds it to its own policy for that
// principal: within it, it runs; past it (a host path the default
// policy does not give a token), it is refused there, naming the rule.
func TestItemsThatDoNotTravel(t *testing.T) {
	h := newHost(t)
	base := host.Request{Kind: tier.Wasm, Image: image(t, "hello"), Entry: "hello", Args: []string{"hello"}, Grants: grants(t)}
	for name, edit := range map[string]func(*host.Request){
		"an image root":  func(r *host.Request) { r.Root = addr.Of([]byte("root")) },
		"standard input": func(r *host.Request) { r.Stdin = strings.NewReader("") },
	} {
		r := base
		edit(&r)
		if _, err := ItemOf("fl-x", 0, r); err == nil {
			t.Errorf("%s: travelled", name)
		}
	}
	tok := base
	tok.Owner = "token:0123456789abcdef"
	p, err := ItemOf("fl-x", 0, tok)
	if err != nil {
		t.Fatal(err)
	}
	if res, _, err := h.RunItem(context.Background(), p); err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("a token's item within its policy: %+v %v", res, err)
	}
	tok.Grants = grants(t, "fs:/etc:ro")
	if p, err = ItemOf("fl-x", 1, tok); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.RunItem(context.Background(), p); err == nil || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("a token's item past its policy: %v", err)
	}
}

// FuzzParseItem: a fleet item's payload, hostile bytes: refused or
// read, never a panic; what is read has what RunItem needs.
func FuzzParseItem(f *testing.F) {
	p, _ := ItemOf("fl-seed", 2, host.Request{Kind: tier.Wasm, Image: []byte("\x00asm"), Entry: "x", Args: []string{"x", "y"},
		Grants: grants(f), Env: map[string]string{"A": "b"}})
	f.Add(p)
	f.Add([]byte(`{"type":"sandbox.fleet-item/1"}`))
	f.Add([]byte(`{"type":"sandbox.fleet-item/1","fleet":"f","index":-1,"entry":"e","args":["a"],"grants":{}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		it, err := ParseItem(b)
		if err != nil {
			return
		}
		if it.Type != ItemType || it.Index < 0 || len(it.Args) == 0 || it.Entry == "" || len(it.Grants) == 0 || it.Fleet == "" {
			t.Fatalf("read an item RunItem cannot run: %+v", it)
		}
	})
}

// FuzzParseItemResult: what a host hands back, hostile bytes.
func FuzzParseItemResult(f *testing.F) {
	b, _ := json.Marshal(ItemResult{Type: ItemResultType, Run: addr.Of([]byte("r")), Bundle: addr.Of([]byte("b"))})
	f.Add(b)
	f.Add([]byte(`{"type":"sandbox.fleet-item-result/1","run":"b3:00"}`))
	f.Add([]byte(`{}{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseItemResult(b)
		if err == nil && (r.Run.IsZero() || r.Bundle.IsZero() || r.Type != ItemResultType) {
			t.Fatalf("read a result without its run or bundle: %+v", r)
		}
	})
}
