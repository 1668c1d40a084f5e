package jcs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/opensubstrate/sandbox/reject"
)

// Marshal returns the canonical bytes of v: encoding/json, then RFC 8785's
// transform (transform: the tests hold it to the reference
// implementation), then Check. It fails if v holds a
// float or an integer outside the profile.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("canon: encode: %w", err)
	}
	out, err := transform(bytes.TrimRight(buf.Bytes(), "\n"))
	if err != nil {
		return nil, fmt.Errorf("canon: jcs: %w", err)
	}
	if err := Check(out); err != nil {
		return nil, fmt.Errorf("canon: value is outside the signed-JSON profile: %w", err)
	}
	return out, nil
}

// Unmarshal checks that b is canonical, then decodes it as Decode does.
// Errors are *reject.Error.
func Unmarshal(b []byte, v any) error {
	if err := Check(b); err != nil {
		return err
	}
	return Decode(b, v)
}

// Decode decodes canonical bytes b into v strictly. Member names must match
// v's fields exactly (encoding/json alone would take "Signer" for
// "signer"), every member without omitempty must be present, an omitempty
// member must not be written out empty, null is refused except for pointer
// and interface fields, and unknown members are refused. Decode does not
// repeat Check: b must already have passed it, alone or as part of a
// larger document. Errors are *reject.Error.
func Decode(b []byte, v any) error {
	if len(b) == 0 {
		return reject.New(reject.Truncated, "", "empty input")
	}
	w := walker{b: b}
	if _, err := w.value(schemaOf(reflect.TypeOf(v)), ""); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	return nil
}

func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return reject.New(reject.UnknownField, "", "%s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	case errors.As(err, &te):
		where := te.Field
		if where == "" {
			where = fmt.Sprintf("offset %d", te.Offset)
		}
		return reject.New(reject.Invalid, where, "the wrong type: a JSON %s, for a field of Go type %s", te.Value, te.Type)
	case errors.As(err, &se):
		return reject.New(reject.Malformed, fmt.Sprintf("offset %d", se.Offset), "%v", se)
	default:
		// Errors from UnmarshalText/UnmarshalJSON of field types.
		return reject.Wrap(reject.Invalid, "", err)
	}
}
