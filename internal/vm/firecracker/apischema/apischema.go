// Package apischema checks HTTP requests against Firecracker's published
// API schema (a Swagger 2.0 document as JSON): the route, the method, the
// body's types, required members, enums, minimums, and no unknown member.
// The Firecracker driver's tests and the fake Firecracker the S5 tests run
// use it; it is not a general Swagger validator.
package apischema

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

// Load reads a schema document.
func Load(path string) (*API, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var a API
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("apischema: %s: %w", path, err)
	}
	return &a, nil
}

// Request checks a request (and consumes its body).
func (a *API) Request(r *http.Request) error {
	op, err := a.Route(r.Method, r.URL.Path)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	for _, p := range op.Parameters {
		if p.In != "body" {
			continue
		}
		if len(b) == 0 {
			if p.Required {
				return fmt.Errorf("%s %s: the body is required", r.Method, r.URL.Path)
			}
			return nil
		}
		if r.Header.Get("Content-Type") != "application/json" {
			return fmt.Errorf("%s %s: content type %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return fmt.Errorf("%s %s: %v", r.Method, r.URL.Path, err)
		}
		return a.Check(p.Schema, v, r.Method+" "+r.URL.Path)
	}
	if len(b) > 0 {
		return fmt.Errorf("%s %s: a body where the API takes none", r.Method, r.URL.Path)
	}
	return nil
}

// API is Firecracker's published API schema (Swagger 2.0), as far as a
// request's route and body are checked against it.
type API struct {
	Paths       map[string]map[string]Operation `json:"paths"`
	Definitions map[string]*Schema              `json:"definitions"`
}

// Operation is one method of one path.
type Operation struct {
	Parameters []struct {
		In       string  `json:"in"`
		Name     string  `json:"name"`
		Required bool    `json:"required"`
		Schema   *Schema `json:"schema"`
	} `json:"parameters"`
	Responses map[string]struct {
		Schema *Schema `json:"schema"`
	} `json:"responses"`
}

// Schema is a JSON schema, as Swagger 2.0 writes them.
type Schema struct {
	Ref        string             `json:"$ref"`
	Type       string             `json:"type"`
	Required   []string           `json:"required"`
	Properties map[string]*Schema `json:"properties"`
	Enum       []any              `json:"enum"`
	Items      *Schema            `json:"items"`
	Minimum    *float64           `json:"minimum"`
}

func (a *API) resolve(s *Schema) *Schema {
	for s != nil && s.Ref != "" {
		s = a.Definitions[strings.TrimPrefix(s.Ref, "#/definitions/")]
	}
	return s
}

// Check validates v against s: types, required members, enums, minimums,
// and no member the schema does not name (Firecracker refuses those).
func (a *API) Check(s *Schema, v any, at string) error {
	s = a.resolve(s)
	if s == nil {
		return fmt.Errorf("%s: no schema", at)
	}
	if len(s.Enum) > 0 {
		ok := false
		for _, e := range s.Enum {
			ok = ok || e == v
		}
		if !ok {
			return fmt.Errorf("%s: %v is not one of %v", at, v, s.Enum)
		}
	}
	switch s.Type {
	case "object", "":
		m, ok := v.(map[string]any)
		if !ok {
			if s.Type == "" {
				return nil
			}
			return fmt.Errorf("%s: want an object, got %T", at, v)
		}
		for _, r := range s.Required {
			if _, ok := m[r]; !ok {
				return fmt.Errorf("%s: required member %q is missing", at, r)
			}
		}
		for k, mv := range m {
			ps, ok := s.Properties[k]
			if !ok && s.Properties != nil {
				return fmt.Errorf("%s: unknown member %q", at, k)
			}
			if ok {
				if err := a.Check(ps, mv, at+"."+k); err != nil {
					return err
				}
			}
		}
	case "string":
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: want a string, got %T", at, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: want a boolean, got %T", at, v)
		}
	case "integer", "number":
		f, ok := v.(float64)
		if !ok || (s.Type == "integer" && f != float64(int64(f))) {
			return fmt.Errorf("%s: want an %s, got %v", at, s.Type, v)
		}
		if s.Minimum != nil && f < *s.Minimum {
			return fmt.Errorf("%s: %v is under the minimum %v", at, f, *s.Minimum)
		}
	case "array":
		l, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: want an array", at)
		}
		for i, x := range l {
			if err := a.Check(s.Items, x, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Route finds the operation for a request's method and path, matching
// path templates ({drive_id}).
func (a *API) Route(method, path string) (Operation, error) {
	for tmpl, ops := range a.Paths {
		ts, ps := strings.Split(tmpl, "/"), strings.Split(path, "/")
		if len(ts) != len(ps) {
			continue
		}
		match := true
		for i := range ts {
			if !(strings.HasPrefix(ts[i], "{") && ps[i] != "") && ts[i] != ps[i] {
				match = false
			}
		}
		if match {
			op, ok := ops[strings.ToLower(method)]
			if !ok {
				return op, fmt.Errorf("%s %s: the API has no such method on %s", method, path, tmpl)
			}
			return op, nil
		}
	}
	return Operation{}, fmt.Errorf("%s %s: no such path in the API", method, path)
}
