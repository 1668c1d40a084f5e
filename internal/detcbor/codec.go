package detcbor

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/fxamacker/cbor/v2"

	"github.com/opensubstrate/sandbox/reject"
)

var (
	encMode cbor.EncMode
	decMode cbor.DecMode
)

func init() {
	var err error
	encMode, err = cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	decMode, err = cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		MaxNestedLevels:   MaxDepth + 1,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		UTF8:              cbor.UTF8RejectInvalid,
		FieldNameMatching: cbor.FieldNameMatchingCaseSensitive,
	}.DecMode()
	if err != nil {
		panic(err)
	}
}

// Marshal returns the core-deterministic encoding of v.
func Marshal(v any) ([]byte, error) {
	b, err := encMode.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("cde: encode: %w", err)
	}
	return b, nil
}

// Unmarshal checks that b is one core-deterministic data item, decodes it
// into v refusing unknown fields, and requires that v re-encodes to b.
// Errors are *reject.Error.
func Unmarshal(b []byte, v any) error {
	if err := Check(b); err != nil {
		return err
	}
	if err := decMode.Unmarshal(b, v); err != nil {
		return decodeError(err)
	}
	again, err := encMode.Marshal(v)
	if err != nil {
		return reject.Wrap(reject.Invalid, "", err)
	}
	if !bytes.Equal(again, b) {
		return reject.New(reject.NonCanonical, "", "the decoded value re-encodes to different bytes (an empty optional field, or a value of the wrong width)")
	}
	return nil
}

func decodeError(err error) error {
	var unknown *cbor.UnknownFieldError
	var typ *cbor.UnmarshalTypeError
	var dup *cbor.DupMapKeyError
	switch {
	case errors.As(err, &unknown):
		return reject.New(reject.UnknownField, "", "map entry %d names a field this version does not define (names are matched exactly)", unknown.Index)
	case errors.As(err, &dup):
		return reject.New(reject.DuplicateKey, "", "%v", err)
	case errors.As(err, &typ):
		return reject.New(reject.Invalid, typ.StructFieldName, "%v", err)
	default:
		return reject.Wrap(reject.Invalid, "", err)
	}
}
