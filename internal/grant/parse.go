package grant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
)

// Syntax is the command-line grammar, for --help texts.
const Syntax = `  net:HOST:PORT              connect to HOST:PORT (IPv6 as [addr]:PORT)
  fs:PATH:ro|rw[:quota=SIZE] a directory, at the same absolute path inside the
                             unit; quota bounds bytes written (rw) or read (ro),
                             SIZE like 512MiB, 1GB, 4096
  kv:NAMESPACE:ro|rw         a key-value namespace
  clock                      the real clock (otherwise a deterministic one)
  random                     real randomness (otherwise a deterministic stream)
  exec:allow:b3:HEX          only binaries on allow-lists may be executed
  exec:deny:b3:HEX           this binary may never be executed (absolute)
  CLASS:ENERGY               a compute device class with a joule budget,
                             CLASS one of cpu simd gpu npu tpu lpu photonic
                             quantum, ENERGY like 5J, 250mJ, 2Wh
  kernel                     a kernel boundary of the unit's own (S5)
  confidential               a verified TEE (S6)
  locality:NAME              locality pinning and a durable audit trail (S7)`

// Parse adds one command-line grant to s. Relative storage paths are
// resolved against cwd (Resolve: refused when cwd is ""). The result is
// not normalized; call Normalize after the last grant.
func (s *Set) Parse(g, cwd string) error {
	kind, rest, _ := strings.Cut(g, ":")
	fail := func(field, format string, args ...any) error {
		return &Error{Grant: g, Field: field, Why: fmt.Sprintf(format, args...)}
	}
	switch kind {
	case "net":
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return fail("host:port", "want net:HOST:PORT (%v)", err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return fail("port", "%q: want 1..65535", port)
		}
		h, err := normHost(host)
		if err != nil {
			return fail("host", "%v", err)
		}
		s.Net = append(s.Net, Net{Host: h, Port: p})
	case "fs":
		parts := strings.Split(rest, ":")
		var quota int64
		if n := len(parts); n >= 3 && strings.HasPrefix(parts[n-1], "quota=") {
			q, err := ParseSize(strings.TrimPrefix(parts[n-1], "quota="))
			if err != nil {
				return fail("quota", "%v", err)
			}
			quota, parts = q, parts[:n-1]
		}
		n := len(parts)
		if n < 2 {
			return fail("mode", "want fs:PATH:ro or fs:PATH:rw")
		}
		mode := Mode(parts[n-1])
		if mode != RO && mode != RW {
			return fail("mode", "%q: want ro or rw", parts[n-1])
		}
		p := strings.Join(parts[:n-1], ":")
		if p == "" {
			return fail("path", "empty")
		}
		p, err := Resolve(p, cwd)
		if err != nil {
			return fail("path", "%v", err)
		}
		s.Storage = append(s.Storage, Storage{Path: p, Mode: mode, Quota: quota})
	case "kv":
		ns, mode, ok := strings.Cut(rest, ":")
		if !ok {
			return fail("mode", "want kv:NAMESPACE:ro or kv:NAMESPACE:rw")
		}
		if err := checkNamespace(ns); err != nil {
			return fail("namespace", "%v", err)
		}
		if Mode(mode) != RO && Mode(mode) != RW {
			return fail("mode", "%q: want ro or rw", mode)
		}
		s.KV = append(s.KV, KV{Namespace: ns, Mode: Mode(mode)})
	case "clock", "random", "kernel", "confidential":
		if rest != "" || strings.Contains(g, ":") {
			return fail("", "%s takes no arguments", kind)
		}
		switch kind {
		case "clock":
			s.Clock = true
		case "random":
			s.Random = true
		case "kernel":
			s.Kernel = true
		case "confidential":
			s.Confidential = true
		}
	case "locality":
		if err := checkNamespace(rest); err != nil {
			return fail("name", "%v", err)
		}
		s.Locality = rest
	case "exec":
		list, a, ok := strings.Cut(rest, ":")
		if !ok {
			return fail("list", "want exec:allow:b3:HEX or exec:deny:b3:HEX")
		}
		ad, err := addr.Parse(a)
		if err != nil {
			return fail("address", "%v", err)
		}
		switch list {
		case "allow":
			s.Exec.Allow = append(s.Exec.Allow, ad)
		case "deny":
			s.Exec.Deny = append(s.Exec.Deny, ad)
		default:
			return fail("list", "%q: want allow or deny", list)
		}
	default:
		c, err := device.ParseClass(kind)
		if err != nil {
			return fail("kind", "unknown grant kind %q; want net, fs, kv, clock, random, exec, kernel, confidential, locality or a device class", kind)
		}
		if rest == "" {
			return fail("budget", "a compute grant carries a joule budget, e.g. %s:5J", kind)
		}
		b, err := energy.Parse(rest)
		if err != nil {
			return fail("budget", "%v", err)
		}
		if b == 0 {
			return fail("budget", "%q is zero: a compute grant carries a budget above zero (a unit with no budget for a class cannot use it at all)", rest)
		}
		s.Compute = append(s.Compute, Compute{Class: c, Budget: b})
	}
	return nil
}

// ParseArgs builds a normalized Set from command-line grants.
func ParseArgs(args []string, cwd string) (Set, error) {
	var s Set
	for _, g := range args {
		if err := s.Parse(g, cwd); err != nil {
			return Set{}, err
		}
	}
	if err := s.Normalize(); err != nil {
		return Set{}, err
	}
	return s, nil
}

// InjectSyntax is the --inject grammar, for --help texts.
const InjectSyntax = `  HOST:HEADER=env:NAME        add HEADER with the value of sandbox's own
                              environment variable NAME to requests to HOST,
                              sent only over TLS to a server whose
                              certificate verifies
  HOST:HEADER=file:/PATH      the same, with the value read from /PATH
  http://HOST:PORT:HEADER=... the same for the net grant HOST:PORT only,
                              allowed over plain HTTP too (a test server on
                              loopback; the secret then travels in clear)
  (HOST needs a net grant; the value never enters the unit)`

// Inject adds a credential injection, "HOST:HEADER=SECRET", to every net
// grant of HOST in s (which must already hold one), or, as
// "http://HOST:PORT:HEADER=SECRET", to the net grant HOST:PORT only,
// allowed over plain HTTP. SECRET is a reference, env:NAME or
// file:/absolute/path; the value stays with the host. The result is not
// normalized.
func (s *Set) Inject(arg string) error {
	fail := func(field, format string, args ...any) error {
		return &Error{Grant: "inject " + arg, Field: field, Why: fmt.Sprintf(format, args...)}
	}
	rest, plain := strings.CutPrefix(arg, "http://")
	var host string
	if strings.HasPrefix(rest, "[") {
		end := strings.Index(rest, "]:")
		if end < 0 {
			return fail("host", "want [IPV6]:HEADER=SECRET")
		}
		host, rest = rest[1:end], rest[end+2:]
	} else {
		var ok bool
		if host, rest, ok = strings.Cut(rest, ":"); !ok {
			return fail("", "want HOST:HEADER=SECRET, e.g. api.example.com:Authorization=env:API_TOKEN")
		}
	}
	h, err := normHost(host)
	if err != nil {
		return fail("host", "%v", err)
	}
	port := 0
	if plain {
		ps, r, ok := strings.Cut(rest, ":")
		if port, err = strconv.Atoi(ps); !ok || err != nil || port < 1 || port > 65535 {
			return fail("port", "want http://HOST:PORT:HEADER=SECRET: plain HTTP is allowed for one port at a time")
		}
		rest = r
	}
	header, secret, ok := strings.Cut(rest, "=")
	if !ok {
		return fail("header", "want HEADER=SECRET after the host")
	}
	in := Inject{Header: header, Secret: secret, Plain: plain}
	if err := checkInject(in); err != nil {
		return fail("secret", "%v", err)
	}
	n := 0
	for i := range s.Net {
		if s.Net[i].Host == h && (port == 0 || s.Net[i].Port == port) {
			s.Net[i].Inject = append(s.Net[i].Inject, in)
			n++
		}
	}
	if n == 0 && port != 0 {
		return fail("host", "no net grant for %s:%d: add --grant net:%s:%d", h, port, h, port)
	}
	if n == 0 {
		return fail("host", "no net grant for %s: add --grant net:%s:PORT", h, h)
	}
	return nil
}

// ParseJSON reads a grants file: the Set's JSON form, by hand or canonical.
// "type" may be omitted; unknown fields are refused; relative storage paths
// are resolved against cwd (Resolve). The result is normalized.
func ParseJSON(b []byte, cwd string) (Set, error) {
	var s Set
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF):
			return Set{}, &Error{Why: "grants file is not JSON: it ends inside a value"}
		case errors.As(err, &se):
			return Set{}, &Error{Why: fmt.Sprintf("grants file is not JSON at byte %d: %v", se.Offset, se)}
		case errors.As(err, &te):
			return Set{}, &Error{Field: te.Field, Why: fmt.Sprintf("a JSON %s cannot be a %s", te.Value, te.Type)}
		default:
			return Set{}, &Error{Why: err.Error()}
		}
	}
	if dec.More() {
		return Set{}, &Error{Why: "grants file holds more than one JSON value"}
	}
	if s.Type != "" && s.Type != Type {
		return Set{}, &Error{Field: "type", Why: fmt.Sprintf("%q, want %q", s.Type, Type)}
	}
	for i := range s.Storage {
		if p := s.Storage[i].Path; p != "" && !filepath.IsAbs(p) {
			r, err := Resolve(p, cwd)
			if err != nil {
				return Set{}, &Error{Grant: "fs:" + p, Field: "path", Why: err.Error()}
			}
			s.Storage[i].Path = r
		}
	}
	if err := s.Normalize(); err != nil {
		return Set{}, err
	}
	return s, nil
}

// ParseFile reads a grants file from disk.
func ParseFile(path, cwd string) (Set, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Set{}, err
	}
	s, err := ParseJSON(b, cwd)
	if err != nil {
		return Set{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Merge adds every grant of o to s and normalizes the result.
func (s *Set) Merge(o Set) error {
	s.Net = append(s.Net, o.Net...)
	s.Storage = append(s.Storage, o.Storage...)
	s.KV = append(s.KV, o.KV...)
	s.Clock = s.Clock || o.Clock
	s.Random = s.Random || o.Random
	s.Exec.Allow = append(s.Exec.Allow, o.Exec.Allow...)
	s.Exec.Deny = append(s.Exec.Deny, o.Exec.Deny...)
	s.Compute = append(s.Compute, o.Compute...)
	s.Kernel = s.Kernel || o.Kernel
	s.Confidential = s.Confidential || o.Confidential
	if o.Locality != "" {
		if s.Locality != "" && s.Locality != o.Locality {
			return &Error{Grant: "locality:" + o.Locality, Why: fmt.Sprintf("conflicts with locality:%s", s.Locality)}
		}
		s.Locality = o.Locality
	}
	return s.Normalize()
}

// ParseSize reads a byte count: digits with an optional unit B, KB, MB, GB,
// TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024). Decimals are
// allowed when the result is a whole number of bytes ("1.5KiB").
func ParseSize(s string) (int64, error) {
	units := []struct {
		name string
		mult int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
	}
	num, mult := s, int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.name); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	whole, frac, _ := strings.Cut(num, ".")
	if whole == "" && frac == "" || strings.Trim(whole+frac, "0123456789") != "" {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", s)
	}
	r, ok := new(big.Rat).SetString(whole + "." + frac + "0")
	if !ok {
		return 0, fmt.Errorf("size %q is not a number", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() || !r.Num().IsInt64() || r.Num().Int64() > 1<<53-1 {
		return 0, fmt.Errorf("size %q is not a whole number of bytes below 2^53", s)
	}
	return r.Num().Int64(), nil
}

// Args is s in the command line's syntax, one grant per element (Parse
// reads each back): what people are shown of a grant set, made from the
// set itself, never from what a caller said it gave. Injected
// credentials, which have no command-line form here, are shown after
// their net grant as " inject HEADER from SECRET".
func (s Set) Args() []string {
	var out []string
	for _, n := range s.Net {
		a := n.String()
		for _, in := range n.Inject {
			a += fmt.Sprintf(" inject %s from %s", in.Header, in.Secret)
			if in.Plain {
				a += " (plain HTTP)"
			}
		}
		out = append(out, a)
	}
	for _, st := range s.Storage {
		a := fmt.Sprintf("fs:%s:%s", st.Path, st.Mode)
		if st.Quota > 0 {
			a += fmt.Sprintf(":quota=%d", st.Quota)
		}
		out = append(out, a)
	}
	for _, kv := range s.KV {
		out = append(out, fmt.Sprintf("kv:%s:%s", kv.Namespace, kv.Mode))
	}
	for _, c := range s.Compute {
		out = append(out, strings.ToLower(string(c.Class))+":"+strings.NewReplacer(" ", "", "µ", "u").Replace(c.Budget.String()))
	}
	for _, a := range s.Exec.Allow {
		out = append(out, "exec:allow:"+a.String())
	}
	for _, a := range s.Exec.Deny {
		out = append(out, "exec:deny:"+a.String())
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{s.Clock, "clock"}, {s.Random, "random"}, {s.Kernel, "kernel"}, {s.Confidential, "confidential"}} {
		if f.on {
			out = append(out, f.name)
		}
	}
	if s.Locality != "" {
		out = append(out, "locality:"+s.Locality)
	}
	return out
}
