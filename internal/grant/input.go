package grant

import (
	"errors"
	"path/filepath"
	"strings"
)

// ErrNoDir is why a relative storage path is refused where there is no
// directory to resolve it in (a service has none of its caller's).
var ErrNoDir = errors.New("a relative path, and there is no directory of yours to resolve it in: give an absolute path")

// Resolve is the one rule for a storage grant's path: an absolute path
// is cleaned; a relative one is resolved against dir, and refused
// (ErrNoDir) when dir is "".
func Resolve(p, dir string) (string, error) {
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	if dir == "" {
		return "", ErrNoDir
	}
	return filepath.Join(dir, p), nil
}

// ResolveArg is the command-line grant g with a relative storage path
// resolved against dir (Resolve), the rest as given: what a caller sends
// a service, which has no directory of its caller's. Anything but a
// storage grant with a relative path is returned unchanged; a malformed
// grant is returned unchanged too, for Parse to refuse.
func ResolveArg(g, dir string) (string, error) {
	rest, ok := strings.CutPrefix(g, "fs:")
	if !ok || strings.HasPrefix(rest, "/") {
		return g, nil
	}
	parts := strings.Split(rest, ":")
	tail := 1 // the mode
	if n := len(parts); n >= 3 && strings.HasPrefix(parts[n-1], "quota=") {
		tail = 2
	}
	if len(parts) <= tail {
		return g, nil
	}
	p := strings.Join(parts[:len(parts)-tail], ":")
	if p == "" {
		return g, nil
	}
	r, err := Resolve(p, dir)
	if err != nil {
		return "", &Error{Grant: g, Field: "path", Why: err.Error()}
	}
	return "fs:" + strings.Join(append([]string{r}, parts[len(parts)-tail:]...), ":"), nil
}

// Input is one grant set as a caller gives it: command-line grants
// (Parse), a set in grants.json's form as a file or as bytes
// (ParseJSON), and credential injections (Inject), with Dir, the
// directory relative storage paths resolve against ("": none, and a
// relative path is refused). The command line and the service read
// grants through it, and nothing else.
type Input struct {
	Args   []string
	File   string
	JSON   []byte
	Inject []string
	Dir    string
}

// The parts of an Input an InputError can be in.
const (
	PartArgs   = "args"
	PartFile   = "file"
	PartJSON   = "json"
	PartInject = "inject"
)

// InputError is an error in one part of an Input (PartArgs, ...), so that
// a caller can name where it was given. Its message is the error's own.
type InputError struct {
	Part string
	Err  error
}

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// Set is the normalized grant set in gives: its command-line grants, then
// its file's and its JSON's merged in, then its injections.
func (in Input) Set() (Set, error) {
	bad := func(part string, err error) (Set, error) { return Set{}, &InputError{Part: part, Err: err} }
	s, err := ParseArgs(in.Args, in.Dir)
	if err != nil {
		return bad(PartArgs, err)
	}
	if in.File != "" {
		f, err := ParseFile(in.File, in.Dir)
		if err != nil {
			return bad(PartFile, err)
		}
		if err := s.Merge(f); err != nil {
			return bad(PartFile, err)
		}
	}
	if in.JSON != nil {
		j, err := ParseJSON(in.JSON, in.Dir)
		if err != nil {
			return bad(PartJSON, err)
		}
		if err := s.Merge(j); err != nil {
			return bad(PartJSON, err)
		}
	}
	for _, a := range in.Inject {
		if err := s.Inject(a); err != nil {
			return bad(PartInject, err)
		}
	}
	if len(in.Inject) > 0 {
		if err := s.Normalize(); err != nil {
			return bad(PartInject, err)
		}
	}
	return s, nil
}
