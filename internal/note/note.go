package note

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

const algEd25519 = 0x01

// KeyID is the first four bytes of SHA-256(name ‖ 0x0A ‖ 0x01 ‖ pub).
func KeyID(name string, pub []byte) [4]byte {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{'\n', algEd25519})
	h.Write(pub)
	var id [4]byte
	copy(id[:], h.Sum(nil))
	return id
}

// validName: non-empty, printable, no spaces or '+'.
func validName(name string) bool {
	if name == "" || !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if r == '+' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// VerifierKey is the verifier key text of pub under name.
func VerifierKey(name string, pub key.Public) (string, error) {
	if !validName(name) {
		return "", fmt.Errorf("note: %q is not a key name (no spaces, no '+')", name)
	}
	id := KeyID(name, pub[:])
	return name + "+" + hex.EncodeToString(id[:]) + "+" + base64.StdEncoding.EncodeToString(append([]byte{algEd25519}, pub[:]...)), nil
}

// Verifier is a parsed verifier key.
type Verifier struct {
	Name string
	ID   [4]byte
	Key  ed25519.PublicKey
}

// ParseVerifierKey reads NAME+HEXID+BASE64KEY, checking the ID.
func ParseVerifierKey(s string) (Verifier, error) {
	parts := strings.SplitN(s, "+", 3) // the key's base64 may hold a '+'
	if len(parts) != 3 || !validName(parts[0]) || len(parts[1]) != 8 {
		return Verifier{}, reject.New(reject.Malformed, "verifier key", "%q: want NAME+HEXID+BASE64", s)
	}
	idb, err := hex.DecodeString(parts[1])
	k, err2 := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || err2 != nil || len(k) != 1+ed25519.PublicKeySize || k[0] != algEd25519 {
		return Verifier{}, reject.New(reject.Malformed, "verifier key", "%q: want an Ed25519 key (type 0x01)", s)
	}
	v := Verifier{Name: parts[0], Key: ed25519.PublicKey(k[1:])}
	copy(v.ID[:], idb)
	if v.ID != KeyID(v.Name, v.Key) {
		return Verifier{}, reject.New(reject.Invalid, "verifier key", "%q: its ID is not its key's", s)
	}
	return v, nil
}

// checkText refuses a text that is not a note's: empty, not ending in
// a newline, holding a blank line, or not UTF-8.
func checkText(text string) error {
	switch {
	case text == "" || !strings.HasSuffix(text, "\n"):
		return reject.New(reject.Malformed, "note text", "a note's text ends in a newline")
	case strings.Contains(text, "\n\n") || strings.HasPrefix(text, "\n"):
		return reject.New(reject.Malformed, "note text", "a note's text holds no blank line")
	case !utf8.ValidString(text):
		return reject.New(reject.Malformed, "note text", "not UTF-8")
	}
	return nil
}

// Sign makes the signed note of text by k under name.
func Sign(text, name string, k key.Private) (string, error) {
	if err := checkText(text); err != nil {
		return "", err
	}
	if !validName(name) {
		return "", fmt.Errorf("note: %q is not a key name", name)
	}
	pub := k.Public()
	id := KeyID(name, pub[:])
	sig := k.Sign([]byte(text))
	return text + "\n— " + name + " " + base64.StdEncoding.EncodeToString(append(id[:], sig...)) + "\n", nil
}

// Open verifies a signed note against verifiers: it returns the text and
// the names of the known signers whose signatures verify. Signatures by
// keys it does not know are skipped; a known key's bad signature, or no
// known signature at all, is refused.
func Open(note []byte, verifiers []Verifier) (string, []string, error) {
	i := bytes.LastIndex(note, []byte("\n\n"))
	if i < 0 {
		return "", nil, reject.New(reject.Malformed, "note", "no blank line before its signatures")
	}
	text := string(note[:i+1])
	if err := checkText(text); err != nil {
		return "", nil, err
	}
	sigs := string(note[i+2:])
	if sigs == "" || !strings.HasSuffix(sigs, "\n") {
		return "", nil, reject.New(reject.Malformed, "note signatures", "no signature lines, or the last without its newline")
	}
	var names []string
	for n, line := range strings.Split(strings.TrimSuffix(sigs, "\n"), "\n") {
		where := fmt.Sprintf("signature line %d", n+1)
		rest, ok := strings.CutPrefix(line, "— ")
		name, b64, ok2 := strings.Cut(rest, " ")
		if !ok || !ok2 || !validName(name) {
			return "", nil, reject.New(reject.Malformed, where, "want \"— NAME SIGNATURE\"")
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(raw) < 5 {
			return "", nil, reject.New(reject.Malformed, where, "the signature is not base64 of a key ID and a signature")
		}
		for _, v := range verifiers {
			if v.Name != name || !bytes.Equal(v.ID[:], raw[:4]) {
				continue
			}
			if len(raw) != 4+ed25519.SignatureSize || !ed25519.Verify(v.Key, []byte(text), raw[4:]) {
				return "", nil, reject.New(reject.Signature, where, "%s's signature does not verify", name)
			}
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "", nil, reject.New(reject.UntrustedKey, "note", "no signature by a key it was given")
	}
	return text, names, nil
}

// Checkpoint is a tlog checkpoint's text.
func Checkpoint(origin string, size uint64, root [32]byte) (string, error) {
	if origin == "" || strings.ContainsAny(origin, "\n") {
		return "", fmt.Errorf("note: %q is not a log origin", origin)
	}
	return origin + "\n" + strconv.FormatUint(size, 10) + "\n" + base64.StdEncoding.EncodeToString(root[:]) + "\n", nil
}

// ParseCheckpoint reads a checkpoint's text (extension lines after the
// root are allowed and returned).
func ParseCheckpoint(text string) (origin string, size uint64, root [32]byte, ext []string, err error) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) < 3 || lines[0] == "" {
		return "", 0, root, nil, reject.New(reject.Malformed, "checkpoint", "want origin, size and root lines")
	}
	size, err = strconv.ParseUint(lines[1], 10, 64)
	if err != nil || strconv.FormatUint(size, 10) != lines[1] {
		return "", 0, root, nil, reject.New(reject.Malformed, "checkpoint size", "%q is not a decimal size", lines[1])
	}
	b, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(b) != 32 {
		return "", 0, root, nil, reject.New(reject.Malformed, "checkpoint root", "not base64 of 32 bytes")
	}
	copy(root[:], b)
	return lines[0], size, root, lines[3:], nil
}
