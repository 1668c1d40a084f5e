package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// listed is what go list says of one package.
type listed struct {
	ImportPath string
	Dir        string
	Standard   bool
	GoFiles    []string
	ImportMap  map[string]string
	Error      *struct{ Err string }
}

func main() {
	goos := flag.String("goos", runtime.GOOS, "the platform's operating system")
	goarch := flag.String("goarch", runtime.GOARCH, "the platform's architecture")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: typecheck [-goos OS] [-goarch ARCH] PATTERN...\n\n"+
			"Type-check the packages PATTERN names, and everything they import,\n"+
			"as the platform's build would see them, without compiling.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	n, err := check(*goos, *goarch, flag.Args(), os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "typecheck:", err)
		os.Exit(1)
	}
	fmt.Printf("typecheck: %s/%s: %d packages type-check\n", *goos, *goarch, n)
}

// check type-checks patterns for goos/goarch, printing each error to w.
func check(goos, goarch string, patterns []string, w io.Writer) (int, error) {
	pkgs, err := list(goos, goarch, patterns)
	if err != nil {
		return 0, err
	}
	fset := token.NewFileSet()
	done := map[string]*types.Package{"unsafe": types.Unsafe}
	sizes := types.SizesFor("gc", goarch)
	if sizes == nil {
		return 0, fmt.Errorf("no sizes for architecture %q", goarch)
	}
	bad := 0
	for _, p := range pkgs {
		if p.ImportPath == "unsafe" {
			continue
		}
		if p.Error != nil {
			fmt.Fprintf(w, "%s: %s\n", p.ImportPath, p.Error.Err)
			bad++
			continue
		}
		files := make([]*ast.File, 0, len(p.GoFiles))
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				return 0, err
			}
			files = append(files, f)
		}
		var errs []error
		conf := types.Config{
			Importer:         importer{done: done, imports: p.ImportMap},
			Sizes:            sizes,
			IgnoreFuncBodies: p.Standard,
			Error:            func(err error) { errs = append(errs, err) },
		}
		tp, _ := conf.Check(p.ImportPath, fset, files, nil)
		done[p.ImportPath] = tp
		for _, e := range errs {
			fmt.Fprintln(w, e)
		}
		if len(errs) > 0 {
			bad++
		}
	}
	if bad > 0 {
		return len(pkgs), fmt.Errorf("%s/%s: %d packages do not type-check", goos, goarch, bad)
	}
	return len(pkgs), nil
}

// list runs go list -deps: every package patterns need, dependencies
// first.
func list(goos, goarch string, patterns []string) ([]listed, error) {
	args := append([]string{"list", "-e", "-deps", "-json=ImportPath,Dir,Standard,GoFiles,ImportMap,Error"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v: %s", err, stderr.Bytes())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list's output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// importer resolves an import of one package: through its ImportMap
// (vendored standard packages) to a package checked before it.
type importer struct {
	done    map[string]*types.Package
	imports map[string]string
}

func (im importer) Import(path string) (*types.Package, error) {
	if p, ok := im.imports[path]; ok {
		path = p
	}
	if p := im.done[path]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("%s was not checked before the package that imports it", path)
}
