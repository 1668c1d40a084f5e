package egress

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/url"
	"strings"
)

// minPattern is the shortest encoded form of a secret that is searched
// for: shorter forms would redact ordinary text.
const minPattern = 8

// pattern is one form in which a secret could come back.
type pattern struct {
	b    []byte
	form string
}

// patterns are the forms of the injected values to look for in
// responses: as they are, base64 (standard and URL alphabets, at each of
// the three alignments a value can have inside a longer encoded text),
// hex (both cases) and URL-encoded; for a value with a scheme
// ("Bearer TOKEN"), the token alone as well.
func patterns(hs []Header) []pattern {
	seen := map[string]bool{}
	var out []pattern
	add := func(s, form string) {
		if len(s) < minPattern || seen[s] {
			return
		}
		seen[s] = true
		out = append(out, pattern{[]byte(s), form})
	}
	for _, h := range hs {
		values := []string{h.Value}
		if _, tok, ok := strings.Cut(h.Value, " "); ok && len(tok) >= minPattern {
			values = append(values, tok)
		}
		for _, v := range values {
			add(v, "as it is")
			for k := 0; k < 3; k++ {
				pre := strings.Repeat("\x00", k) + v
				for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
					e := enc.EncodeToString([]byte(pre))
					// Drop the characters that also depend on the bytes
					// before and after the value.
					start := [3]int{0, 2, 3}[k]
					end := len(e)
					if (k+len(v))%3 != 0 {
						end--
					}
					if start < end {
						add(e[start:end], "base64")
					}
				}
			}
			add(hex.EncodeToString([]byte(v)), "hex")
			add(strings.ToUpper(hex.EncodeToString([]byte(v))), "hex")
			add(url.QueryEscape(v), "URL-encoded")
			add(url.PathEscape(v), "URL-encoded")
		}
	}
	return out
}

// redactBytes overwrites, in place, every occurrence of a pattern with as
// many '*', and returns the forms it found.
func redactBytes(b []byte, pats []pattern) []string {
	var found []string
	for _, p := range pats {
		hit := false
		for i := 0; ; {
			j := bytes.Index(b[i:], p.b)
			if j < 0 {
				break
			}
			copy(b[i+j:i+j+len(p.b)], bytes.Repeat([]byte{'*'}, len(p.b)))
			i += j + len(p.b)
			hit = true
		}
		if hit {
			found = append(found, p.form)
		}
	}
	return found
}

// redactor passes a body through, with every pattern overwritten: it
// holds back the last bytes of what it has read until it knows whether
// they start a pattern. The length never changes (a Content-Length holds).
type redactor struct {
	src   io.Reader
	pats  []pattern
	keep  int // longest pattern - 1
	buf   []byte
	ready int // bytes of buf checked and free to go
	err   error
	found func(form string)
}

func newRedactor(src io.Reader, pats []pattern, found func(string)) *redactor {
	r := &redactor{src: src, pats: pats, found: found}
	for _, p := range pats {
		r.keep = max(r.keep, len(p.b)-1)
	}
	return r
}

func (r *redactor) Read(p []byte) (int, error) {
	for r.ready == 0 {
		if r.err != nil {
			if len(r.buf) == 0 {
				return 0, r.err
			}
			r.check(len(r.buf))
			break
		}
		chunk := make([]byte, 32<<10)
		n, err := r.src.Read(chunk)
		r.buf = append(r.buf, chunk[:n]...)
		r.err = err
		if r.err == nil && len(r.buf) > r.keep {
			r.check(len(r.buf) - r.keep)
		}
	}
	n := copy(p, r.buf[:r.ready])
	r.buf = r.buf[n:]
	r.ready -= n
	return n, nil
}

// check redacts what is held and frees its first n bytes: every match
// that starts in them lies wholly in what is held.
func (r *redactor) check(n int) {
	for _, f := range redactBytes(r.buf, r.pats) {
		r.found(f)
	}
	r.ready = n
}
