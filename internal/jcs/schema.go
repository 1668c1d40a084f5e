package jcs

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"sync"

	"github.com/opensubstrate/sandbox/reject"
)

// A schema is what Decode expects of a JSON value, derived once per Go
// type: encoding/json matches member names case-insensitively, ignores
// missing members and accepts empty optional members written out, and a
// signed record must have exactly one spelling, so members are checked
// against the type before decoding.
type schema struct {
	kind   schemaKind
	fields map[string]*field // kindStruct
	elem   *schema           // kindList, kindMap
	order  []*field          // kindStruct, declaration order
}

type field struct {
	name      string
	omitEmpty bool
	// omitZero: optional, and left out when zero (a value written out
	// must not be the zero value of typ).
	omitZero bool
	typ      reflect.Type
	nullable bool // a pointer or interface: null is its zero value
	s        *schema
}

type schemaKind int

const (
	kindAny schemaKind = iota
	kindStruct
	kindList
	kindMap
)

var (
	schemaMu    sync.Mutex
	schemaCache = map[reflect.Type]*schema{}
	textUnm     = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonUnm     = reflect.TypeFor[json.Unmarshaler]()
)

func schemaOf(t reflect.Type) *schema {
	schemaMu.Lock()
	defer schemaMu.Unlock()
	return build(t, map[reflect.Type]*schema{})
}

func build(t reflect.Type, busy map[reflect.Type]*schema) *schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s, ok := schemaCache[t]; ok {
		return s
	}
	if s, ok := busy[t]; ok {
		return s
	}
	s := &schema{}
	busy[t] = s
	pt := reflect.PointerTo(t)
	switch {
	case pt.Implements(textUnm) || pt.Implements(jsonUnm) || t.Implements(jsonUnm):
		// A leaf with its own text form (addresses, keys, tiers, raw JSON).
	case t.Kind() == reflect.Struct:
		s.kind = kindStruct
		s.fields = map[string]*field{}
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			if !sf.IsExported() {
				continue
			}
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if name == "" {
				name = sf.Name
			}
			f := &field{
				name:      name,
				omitEmpty: strings.Contains(","+opts+",", ",omitempty,"),
				omitZero:  strings.Contains(","+opts+",", ",omitzero,"),
				typ:       sf.Type,
				nullable:  sf.Type.Kind() == reflect.Pointer || sf.Type.Kind() == reflect.Interface,
				s:         build(sf.Type, busy),
			}
			s.fields[name] = f
			s.order = append(s.order, f)
		}
	case t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8, t.Kind() == reflect.Array:
		s.kind = kindList
		s.elem = build(t.Elem(), busy)
	case t.Kind() == reflect.Map:
		s.kind = kindMap
		s.elem = build(t.Elem(), busy)
	}
	schemaCache[t] = s
	return s
}

// walker reads canonical bytes (already checked by Check) against a schema.
type walker struct {
	b []byte
	i int
}

func (w *walker) fail(code reject.Code, path, format string, args ...any) error {
	if path == "" {
		path = "(top)"
	}
	return reject.New(code, path, format, args...)
}

// value walks one value at w.i against s and returns its raw bytes.
func (w *walker) value(s *schema, path string) ([]byte, error) {
	start := w.i
	switch c := w.b[w.i]; {
	case c == '{':
		w.i++
		var seen map[string]bool
		if s.kind == kindStruct {
			seen = make(map[string]bool, len(s.order))
		}
		for w.b[w.i] != '}' {
			if w.b[w.i] == ',' {
				w.i++
			}
			name := w.str()
			w.i++ // ':'
			sub := &schema{}
			p := path + "." + name
			if path == "" {
				p = name
			}
			switch s.kind {
			case kindStruct:
				f, ok := s.fields[name]
				if !ok {
					return nil, w.fail(reject.UnknownField, p, "member %q is not defined here (names are matched exactly)", name)
				}
				seen[name] = true
				raw, err := w.value(f.s, p)
				if err != nil {
					return nil, err
				}
				if f.omitEmpty && (isEmpty(raw) && !f.nullable || string(raw) == "null") {
					return nil, w.fail(reject.NonCanonical, p, "an empty optional member is left out, not written as %s", raw)
				}
				if string(raw) == "null" && !f.nullable {
					return nil, w.fail(reject.Invalid, p, "null is not a value of this member")
				}
				if f.omitZero {
					z := reflect.New(f.typ)
					if json.Unmarshal(raw, z.Interface()) == nil && z.Elem().IsZero() {
						return nil, w.fail(reject.NonCanonical, p, "a zero optional member is left out, not written as %s", raw)
					}
				}
				continue
			case kindMap:
				sub = s.elem
			}
			if _, err := w.value(sub, p); err != nil {
				return nil, err
			}
		}
		w.i++
		if s.kind == kindStruct {
			for _, f := range s.order {
				if !seen[f.name] && !f.omitEmpty && !f.omitZero {
					p := path + "." + f.name
					if path == "" {
						p = f.name
					}
					return nil, w.fail(reject.MissingField, p, "required member is missing")
				}
			}
		}
	case c == '[':
		w.i++
		elem := &schema{}
		if s.kind == kindList {
			elem = s.elem
		}
		for n := 0; w.b[w.i] != ']'; n++ {
			if w.b[w.i] == ',' {
				w.i++
			}
			if _, err := w.value(elem, path+"[]"); err != nil {
				return nil, err
			}
		}
		w.i++
	case c == '"':
		w.str()
	default: // number or literal: up to the next delimiter
		for w.i < len(w.b) && w.b[w.i] != ',' && w.b[w.i] != '}' && w.b[w.i] != ']' {
			w.i++
		}
	}
	return w.b[start:w.i], nil
}

// str skips a canonical string at w.i and returns its raw contents, which
// for member names (no escapes in any name this module defines) are the name.
func (w *walker) str() string {
	w.i++
	start := w.i
	for w.b[w.i] != '"' {
		if w.b[w.i] == '\\' {
			w.i++
		}
		w.i++
	}
	s := string(w.b[start:w.i])
	w.i++
	return s
}

func isEmpty(raw []byte) bool {
	switch string(raw) {
	case `""`, `0`, `false`, `null`, `[]`, `{}`:
		return true
	}
	return false
}

// OneValue reports whether b is exactly one JSON value. b must be a
// sub-slice of a document that already passed Check, which is what makes
// this cheap structural walk sufficient.
func OneValue(b []byte) (ok bool) {
	if len(b) == 0 {
		return false
	}
	// A slice cut inside a string of a checked document can end mid-value;
	// the walk does not bounds-check, so such a cut is caught here.
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	w := walker{b: b}
	if _, err := w.value(&schema{}, ""); err != nil {
		return false
	}
	return w.i == len(b)
}
