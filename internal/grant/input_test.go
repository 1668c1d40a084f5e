package grant

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResolve: one rule for a storage path: absolute kept (cleaned),
// relative resolved against the directory, refused where there is none.
func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		p, dir, want string
		err          error
	}{
		{"/a/./b/", "", "/a/b", nil},
		{"/a", "/home", "/a", nil},
		{"x", "/home/u", "/home/u/x", nil},
		{"./x/../y", "/home/u", "/home/u/y", nil},
		{"x", "", "", ErrNoDir},
	} {
		got, err := Resolve(tc.p, tc.dir)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("Resolve(%q, %q) = %q, %v; want %q, %v", tc.p, tc.dir, got, err, tc.want, tc.err)
		}
	}
}

// TestResolveArg: a command-line grant is sent to a service with its
// relative storage path resolved as Parse would resolve it, the rest as
// given; what is not such a grant is left for Parse to judge.
func TestResolveArg(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"fs:work:rw", "fs:/home/u/work:rw"},
		{"fs:./a/../b:ro:quota=1MiB", "fs:/home/u/b:ro:quota=1MiB"},
		{"fs:a:b:rw", "fs:/home/u/a:b:rw"},
		{"fs:/abs:rw", "fs:/abs:rw"},
		{"cpu:5J", "cpu:5J"},
		{"fs:x", "fs:x"},
		{"fs::rw", "fs::rw"},
	} {
		got, err := ResolveArg(tc.in, "/home/u")
		if err != nil || got != tc.want {
			t.Errorf("ResolveArg(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			continue
		}
		// Parse reads it back to what it reads the original as.
		a, aerr := ParseArgs([]string{tc.in}, "/home/u")
		b, berr := ParseArgs([]string{got}, "/")
		if (aerr == nil) != (berr == nil) || aerr == nil && !setsEqual(a, b) {
			t.Errorf("ResolveArg(%q) = %q: parsed %+v %v, the original %+v %v", tc.in, got, b, berr, a, aerr)
		}
	}
	if _, err := ResolveArg("fs:work:rw", ""); err == nil || !strings.Contains(err.Error(), ErrNoDir.Error()) {
		t.Errorf("ResolveArg with no directory: %v", err)
	}
}

func setsEqual(a, b Set) bool {
	ab, _, _ := a.Canonical()
	bb, _, _ := b.Canonical()
	return string(ab) == string(bb)
}

// TestInput: the command line's grants and the service's are read one
// way: arguments, a file or JSON set, injections, one relative-path
// rule; an error says which part it is in.
func TestInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "grants.json")
	os.WriteFile(file, []byte(`{"storage":[{"path":"data","mode":"ro"}],"clock":true}`), 0o644)
	s, err := Input{Args: []string{"net:api.example.com:443", "fs:work:rw"}, File: file, Inject: []string{"api.example.com:Authorization=env:T"}, Dir: "/home/u"}.Set()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ParseArgs([]string{"net:api.example.com:443", "fs:/home/u/work:rw", "fs:/home/u/data:ro", "clock"}, "/")
	want.Net[0].Inject = []Inject{{Header: "Authorization", Secret: "env:T"}}
	if !setsEqual(s, want) {
		t.Errorf("Set = %+v, want %+v", s, want)
	}
	// The same set as JSON bytes, as a service is sent it.
	b, _, _ := want.Canonical()
	if j, err := (Input{JSON: b}).Set(); err != nil || !setsEqual(j, want) {
		t.Errorf("JSON set = %+v, %v", j, err)
	}
	for _, tc := range []struct {
		name string
		in   Input
		part string
		says string
	}{
		{"relative argument, no directory", Input{Args: []string{"fs:work:rw"}}, PartArgs, "no directory of yours"},
		{"relative JSON path, no directory", Input{JSON: []byte(`{"storage":[{"path":"work","mode":"rw"}]}`)}, PartJSON, "no directory of yours"},
		{"bad argument", Input{Args: []string{"net:x"}, Dir: "/"}, PartArgs, "field host:port"},
		{"bad JSON", Input{JSON: []byte(`{"colour":1}`)}, PartJSON, "unknown field"},
		{"missing file", Input{File: filepath.Join(dir, "none"), Dir: "/"}, PartFile, "no such file"},
		{"conflict between parts", Input{Args: []string{"locality:eu"}, JSON: []byte(`{"locality":"us"}`)}, PartJSON, "conflicts"},
		{"injection with no net grant", Input{Inject: []string{"a.com:H=env:X"}, Dir: "/"}, PartInject, "no net grant"},
	} {
		_, err := tc.in.Set()
		var ie *InputError
		if !errors.As(err, &ie) || ie.Part != tc.part || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error in %s saying %q", tc.name, err, tc.part, tc.says)
		}
	}
}

// FuzzInput: whatever a service's caller sends as grants and a JSON set
// is either refused with an *InputError or read to a set in canonical
// form with only absolute paths.
func FuzzInput(f *testing.F) {
	f.Add("fs:/a:rw", []byte(`{"clock":true}`))
	f.Add("fs:a:rw", []byte(`{"storage":[{"path":"b","mode":"ro"}]}`))
	f.Add("cpu:5J", []byte(`null`))
	f.Fuzz(func(t *testing.T, arg string, js []byte) {
		s, err := Input{Args: []string{arg}, JSON: js}.Set()
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		b, _, err := s.Canonical()
		if err != nil {
			t.Fatalf("accepted but cannot canonicalize: %v", err)
		}
		if _, err := Decode(b); err != nil {
			t.Fatalf("accepted set is not canonical: %v", err)
		}
		for _, st := range s.Storage {
			if !filepath.IsAbs(st.Path) {
				t.Fatalf("accepted a relative path %q with no directory", st.Path)
			}
		}
	})
}
