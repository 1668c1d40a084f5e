package vectors

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/fxamacker/cbor/v2"
	gojcs "github.com/gowebpki/jcs"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/detcbor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/verify"
)

// KindEncoding is the kind of the encoding vectors: inputs and the exact
// bytes a conforming implementation writes for them.
const KindEncoding = "encoding"

// Encoding is one encoding vector. For "jcs" the input is a JSON text in
// some other form (members out of order, whitespace) and the output its
// RFC 8785 form; for "cde" the input is CBOR in some other valid form
// (unsorted keys, non-shortest heads, indefinite lengths) and the output
// its RFC 8949 §4.2.1 core deterministic form; for "sign-attestation"
// and "sign-receipt" the input is the record to sign (JSON, or the CBOR
// payload) and the output the exact envelope the published test key
// makes of it (Ed25519 is deterministic).
type Encoding struct {
	Name    string    `json:"name"`
	Codec   string    `json:"codec"`
	Input   string    `json:"input_hex"`
	Output  string    `json:"output_hex"`
	Address addr.Addr `json:"address"` // BLAKE3 of the output
}

// encodingVectors builds the encoding vectors from the sample run.
func encodingVectors(good *run, k key.Private) ([]byte, error) {
	var vs []Encoding
	add := func(name, codec string, in, out []byte) {
		vs = append(vs, Encoding{Name: name, Codec: codec, Input: hex.EncodeToString(in), Output: hex.EncodeToString(out), Address: addr.Of(out)})
	}
	for _, f := range []string{verify.FileUnit, verify.FileGrants, verify.FileDecisions} {
		out := good.files[f]
		in, err := scramble(out)
		if err != nil {
			return nil, err
		}
		add(strings.TrimSuffix(f, ".json"), "jcs", in, out)
	}
	claim, err := jcs.Marshal(good.claim)
	if err != nil {
		return nil, err
	}
	in, err := scramble(claim)
	if err != nil {
		return nil, err
	}
	add("claim", "jcs", in, claim)
	add("attestation", "sign-attestation", claim, good.files[verify.FileAttestation])

	payload, err := payloadOf(good.files[verify.FileReceipt])
	if err != nil {
		return nil, err
	}
	loose, err := loosen(payload)
	if err != nil {
		return nil, err
	}
	add("receipt-payload", "cde", loose, payload)
	add("receipt", "sign-receipt", payload, good.files[verify.FileReceipt])
	return jcs.Marshal(vs)
}

// scramble writes a JSON text's objects with their members in reverse
// order and spaces after separators: the same value, another text.
func scramble(b []byte) ([]byte, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	var write func(v any)
	write = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Sort(sort.Reverse(sort.StringSlice(keys)))
			out.WriteString("{ ")
			for i, k := range keys {
				if i > 0 {
					out.WriteString(", ")
				}
				kb, _ := json.Marshal(k)
				out.Write(kb)
				out.WriteString(": ")
				write(x[k])
			}
			out.WriteString(" }")
		case []any:
			out.WriteString("[ ")
			for i, e := range x {
				if i > 0 {
					out.WriteString(", ")
				}
				write(e)
			}
			out.WriteString(" ]")
		default:
			eb, _ := json.Marshal(x)
			out.Write(eb)
		}
	}
	write(v)
	return out.Bytes(), nil
}

// loosen writes a deterministic CBOR map in another valid form: an
// indefinite-length map with its entries in reverse order and every
// unsigned integer head in an eight-byte argument.
func loosen(m []byte) ([]byte, error) {
	ents, err := pairs(m)
	if err != nil {
		return nil, err
	}
	out := []byte{0xbf}
	for i := len(ents) - 1; i >= 0; i-- {
		out = append(out, ents[i][0]...)
		v := ents[i][1]
		if len(v) > 0 && v[0]>>5 == 0 { // an unsigned integer: widen it
			var n uint64
			if err := cbor.Unmarshal(v, &n); err == nil {
				v = []byte{0x1b, byte(n >> 56), byte(n >> 48), byte(n >> 40), byte(n >> 32), byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
			}
		}
		out = append(out, v...)
	}
	return append(out, 0xff), nil
}

// ownJCS decodes a JSON record leniently into its type and writes it
// with this host's canonical writer, which must give want.
func ownJCS(name string, in, want []byte) error {
	var v any
	switch name {
	case "unit":
		v = new(unit.Unit)
	case "grants":
		v = new(grant.Set)
	case "decisions":
		v = new(grant.Log)
	case "claim":
		v = new(attest.Claim)
	default:
		return fmt.Errorf("no record type is called %q", name)
	}
	if err := json.Unmarshal(in, v); err != nil {
		return err
	}
	got, err := jcs.Marshal(v)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("this host writes %s as %s, the vector says %s", name, got, want)
	}
	return nil
}

// CheckEncoding re-encodes every vector's input and compares the bytes.
func CheckEncoding(b []byte) error {
	var vs []Encoding
	if err := jcs.Unmarshal(b, &vs); err != nil {
		return err
	}
	k := TestKey()
	for _, v := range vs {
		in, err1 := hex.DecodeString(v.Input)
		want, err2 := hex.DecodeString(v.Output)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("%s: input_hex and output_hex are hex", v.Name)
		}
		var got []byte
		var err error
		switch v.Codec {
		case "jcs":
			// An independent RFC 8785 implementation, then this host's
			// own writer for the record the vector names.
			if got, err = gojcs.Transform(in); err == nil {
				err = ownJCS(v.Name, in, want)
			}
		case "cde":
			var r receipt.Receipt
			if err = cbor.Unmarshal(in, &r); err == nil {
				got, err = detcbor.Marshal(r)
			}
		case "sign-attestation":
			got = rawEnvelope(in, k.Sign(in))
		case "sign-receipt":
			got, err = receipt.SealPayload(in, k, receipt.AlgEdDSA, nil)
		default:
			return fmt.Errorf("%s: unknown codec %q", v.Name, v.Codec)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", v.Name, err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s (%s): the input encodes to %x, the vector says %x", v.Name, v.Codec, got, want)
		}
		if addr.Of(want) != v.Address {
			return fmt.Errorf("%s: the output hashes to %s, the vector says %s", v.Name, addr.Of(want), v.Address)
		}
	}
	return nil
}
