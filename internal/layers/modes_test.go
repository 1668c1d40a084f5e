package layers

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// modeArg is, for the os functions that take a file mode, its
// argument's index.
var modeArg = map[string]int{"Chmod": 1, "Mkdir": 1, "MkdirAll": 1, "WriteFile": 2, "OpenFile": 2}

// bareModeBits are the calls in src that give an os function a constant
// mode with a bare set-user-ID, set-group-ID or sticky bit (0o7000),
// which Go's os drops: it wants os.ModeSetuid, os.ModeSetgid and
// os.ModeSticky. Each is "LINE: CALL".
func bareModeBits(fset *token.FileSet, name string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	osName := ""
	for _, imp := range f.Imports {
		if imp.Path.Value == `"os"` {
			osName = "os"
			if imp.Name != nil {
				osName = imp.Name.Name
			}
		}
	}
	if osName == "" {
		return nil, nil
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		x, ok := sel.X.(*ast.Ident)
		i, takes := modeArg[sel.Sel.Name]
		if !ok || x.Name != osName || !takes || i >= len(call.Args) {
			return true
		}
		lit, ok := call.Args[i].(*ast.BasicLit)
		if !ok || lit.Kind != token.INT {
			return true
		}
		v, exact := constant.Uint64Val(constant.MakeFromLiteral(lit.Value, lit.Kind, 0))
		if exact && v&0o7000 != 0 {
			found = append(found, fset.Position(call.Pos()).String()+": os."+sel.Sel.Name+" with "+lit.Value)
		}
		return true
	})
	return found, nil
}

// TestNoBareModeBits: no call in the tree gives os a mode with a bare
// 0o4000, 0o2000 or 0o1000, which it would drop without a word (the
// escape batteries' setuid binary was never one, and an S5 guest's /tmp
// was not sticky, until 2026-12-06).
func TestNoBareModeBits(t *testing.T) {
	fset := token.NewFileSet()
	root := filepath.Join("..", "..")
	files := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != root || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		files++
		found, err := bareModeBits(fset, p, nil)
		if err != nil {
			return err
		}
		for _, f := range found {
			t.Errorf("%s: Go's os drops a bare set-id or sticky bit; use os.ModeSetuid, os.ModeSetgid or os.ModeSticky", f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 500 {
		t.Fatalf("read %d Go files: is this the module's tree?", files)
	}
}

// The check finds what it is for, and only that.
func TestBareModeBitsCaught(t *testing.T) {
	for src, want := range map[string]int{
		`package p; import "os"; func f() { os.Chmod("/tmp", 0o1777) }`:                              1,
		`package p; import "os"; func f() { os.Chmod("/x", 04755); os.Mkdir("/y", 02775) }`:          2,
		`package p; import "os"; func f() { os.WriteFile("/x", nil, 0o4755) }`:                       1,
		`package p; import "os"; func f() { os.OpenFile("/x", 0, 0o6755) }`:                          1,
		`package p; import xos "os"; func f() { xos.MkdirAll("/x", 0o1777) }`:                        1,
		`package p; import "os"; func f() { os.Chmod("/tmp", os.ModeSticky|0o777) }`:                 0,
		`package p; import "os"; func f() { os.Chmod("/x", 0o755); os.WriteFile("/x", nil, 0o644) }`: 0,
		`package p; import "golang.org/x/sys/unix"; func f() { unix.Chmod("/x", 0o4755) }`:           0,
	} {
		found, err := bareModeBits(token.NewFileSet(), "p.go", src)
		if err != nil || len(found) != want {
			t.Errorf("%s: found %v (%v), want %d", src, found, err, want)
		}
	}
}
