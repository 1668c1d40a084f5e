package attest

import (
	"encoding/hex"
	"unicode/utf8"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/tier"
)

// fastEnvelope reads an envelope written exactly as Seal writes one, in
// one pass over its bytes: the common case of a verification, where the
// strict path (jcs.Check of the whole envelope, splitting it, then
// jcs.Decode of the claim through encoding/json) costs half as much
// again as the signature. It matches the canonical form member by
// member in JCS order, with no escape in any string, every integer
// canonical and every member's value in the form its type's decoder
// accepts; anything else (an escape, an unknown or misplaced member, a
// value written out empty, a number out of its range) is left to the
// strict path, which accepts the same envelopes and names what is wrong
// with the others. FuzzFastEnvelope holds the two to that: whatever
// this accepts, jcs.Check accepts, splits the same way and decodes to
// the same claim. It checks nothing of the claim's meaning: Verify runs
// Validate on what either path decoded.
func fastEnvelope(b []byte) (c Claim, claim []byte, sig string, ok bool) {
	p := fastParser{b: b}
	if !p.lit(`{"claim":`) {
		return Claim{}, nil, "", false
	}
	start := p.i
	p.claim(&c)
	end := p.i
	if !p.lit(`,"signature":"`) {
		return Claim{}, nil, "", false
	}
	s := p.i
	for p.i < len(b) && base64url(b[p.i]) {
		p.i++
	}
	e := p.i
	if p.bad || e == s || !p.lit(`"}`) || p.i != len(b) {
		return Claim{}, nil, "", false
	}
	return c, b[start:end], string(b[s:e]), true
}

func base64url(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// fastParser reads canonical JSON of known shape. Once bad is set every
// method is a no-op that reads nothing, so a caller checks bad once at
// the end.
type fastParser struct {
	b   []byte
	i   int
	bad bool
	// sep is what comes before the next member of the object being
	// read: nothing after '{', a comma after a member.
	sep bool
}

// lit consumes s if the input continues with it.
func (p *fastParser) lit(s string) bool {
	if p.bad || len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		p.bad = true
		return false
	}
	p.i += len(s)
	return true
}

// open reads the '{' of an object; close its '}'.
func (p *fastParser) open()  { p.lit("{"); p.sep = false }
func (p *fastParser) close() { p.lit("}"); p.sep = true }

// opt consumes the name of an optional member (and the comma before it)
// if the member is next, and reports whether it was.
func (p *fastParser) opt(name string) bool {
	if p.bad {
		return false
	}
	i := p.i
	if p.sep {
		if i >= len(p.b) || p.b[i] != ',' {
			return false
		}
		i++
	}
	if len(p.b)-i < len(name)+3 || p.b[i] != '"' || string(p.b[i+1:i+1+len(name)]) != name || p.b[i+1+len(name)] != '"' || p.b[i+2+len(name)] != ':' {
		return false
	}
	p.i = i + len(name) + 3
	p.sep = true
	return true
}

// req reads the name of a required member.
func (p *fastParser) req(name string) {
	if !p.opt(name) {
		p.bad = true
	}
}

// raw reads a string's contents: printable, no escape, valid UTF-8.
func (p *fastParser) raw() []byte {
	if !p.lit(`"`) {
		return nil
	}
	start, ascii := p.i, true
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			if !ascii && !utf8.Valid(s) {
				p.bad = true
				return nil
			}
			return s
		case c < 0x20 || c == '\\':
			p.bad = true
			return nil
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	p.bad = true
	return nil
}

// str reads a string.
func (p *fastParser) str() string { return string(p.raw()) }

// nonEmpty reads a string of an omitempty member: written out, it is not
// empty.
func (p *fastParser) nonEmpty() string {
	s := p.raw()
	if len(s) == 0 {
		p.bad = true
	}
	return string(s)
}

// hex64 decodes 64 lowercase hex digits into out.
func (p *fastParser) hex64(s []byte, out []byte) {
	if len(s) != 64 {
		p.bad = true
		return
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			p.bad = true
			return
		}
	}
	hex.Decode(out, s)
}

// addr reads an address in its text form ("b3:" and 64 lowercase hex
// digits, the zero address included: Validate judges that).
func (p *fastParser) addr() (a addr.Addr) {
	s := p.raw()
	if len(s) != len(addr.Prefix)+64 || string(s[:len(addr.Prefix)]) != addr.Prefix {
		p.bad = true
		return a
	}
	p.hex64(s[len(addr.Prefix):], a[:])
	return a
}

func (p *fastParser) addrPtr() *addr.Addr {
	a := p.addr()
	return &a
}

// public reads a key in its text form; Verify checks it is not weak.
func (p *fastParser) public() (k key.Public) {
	s := p.raw()
	if len(s) != len(key.PublicPrefix)+64 || string(s[:len(key.PublicPrefix)]) != key.PublicPrefix {
		p.bad = true
		return k
	}
	p.hex64(s[len(key.PublicPrefix):], k[:])
	return k
}

// tier reads "S0".."S7".
func (p *fastParser) tier() tier.Tier {
	s := p.raw()
	if len(s) != 2 || s[0] != 'S' || s[1] < '0' || s[1] > '7' {
		p.bad = true
		return 0
	}
	return tier.Tier(s[1] - '0')
}

// int reads a canonical integer of at most nine digits, which every int
// holds.
func (p *fastParser) int() int {
	if p.bad {
		return 0
	}
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	start, n := p.i, 0
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' && p.i-start < 10 {
		n = n*10 + int(p.b[p.i]-'0')
		p.i++
	}
	switch d := p.i - start; {
	case d == 0 || d > 9, d > 1 && p.b[start] == '0', neg && n == 0:
		p.bad = true
		return 0
	}
	if neg {
		n = -n
	}
	return n
}

// claim reads a claim object, its members in JCS order.
func (p *fastParser) claim(c *Claim) {
	p.open()
	if p.opt("audit_prev") {
		c.AuditPrev = p.addrPtr()
	}
	p.req("decisions")
	c.Decisions = p.addr()
	p.req("ended")
	c.Ended = p.str()
	if p.opt("evidence") {
		c.Evidence = p.evidence()
	}
	p.req("executor")
	c.Executor = p.str()
	p.req("grants")
	c.Grants = p.addr()
	p.req("hardware")
	p.hardware(&c.Hardware)
	p.req("image")
	c.Image = p.addr()
	if p.opt("jcp") {
		c.JCP = p.addrPtr()
	}
	if p.opt("journal") {
		c.Journal = p.addrPtr()
	}
	if p.opt("locality") {
		l := &LocalityCite{}
		p.open()
		p.req("claim")
		l.Claim = p.addr()
		p.req("region")
		l.Region = p.str()
		p.close()
		c.Locality = l
	}
	if p.opt("notes") {
		p.lit("[")
		c.Notes = []string{p.str()}
		for !p.bad && p.i < len(p.b) && p.b[p.i] == ',' {
			p.i++
			c.Notes = append(c.Notes, p.str())
		}
		p.lit("]")
	}
	p.req("outcome")
	p.outcome(&c.Outcome)
	p.req("receipt")
	c.Receipt = p.addr()
	if p.opt("record") {
		r := &RecordCite{}
		p.open()
		p.req("genesis")
		r.Genesis = p.addr()
		p.req("head")
		r.Head = p.addr()
		p.close()
		c.Record = r
	}
	p.req("signer")
	c.Signer = p.public()
	p.req("started")
	c.Started = p.str()
	p.req("tier")
	p.open()
	p.req("chosen")
	c.Tier.Chosen = p.tier()
	p.req("reason")
	c.Tier.Reason = p.str()
	p.req("required")
	c.Tier.Required = p.tier()
	p.close()
	p.req("type")
	c.Type = p.str()
	p.req("unit")
	c.Unit = p.addr()
	p.close()
}

func (p *fastParser) evidence() *Evidence {
	e := &Evidence{}
	p.open()
	if p.opt("devices") {
		e.Devices = p.addrPtr()
	}
	p.req("kind")
	e.Kind = p.str()
	p.req("provider")
	e.Provider = p.str()
	p.req("report")
	e.Report = p.addr()
	if p.opt("software") {
		p.lit("true") // false is left out
		e.Software = true
	}
	p.close()
	return e
}

func (p *fastParser) hardware(h *Hardware) {
	p.open()
	p.req("devices")
	p.lit("[")
	h.Devices = []Device{}
	for !p.bad && p.i < len(p.b) && p.b[p.i] != ']' {
		if len(h.Devices) > 0 {
			p.lit(",")
		}
		var d Device
		p.open()
		p.req("class")
		d.Class = device.Class(p.str())
		p.req("driver")
		d.Driver = p.str()
		if p.opt("id") {
			d.ID = p.nonEmpty()
		}
		p.req("model")
		d.Model = p.str()
		p.close()
		h.Devices = append(h.Devices, d)
	}
	p.lit("]")
	p.sep = true
	p.req("host")
	p.open()
	p.req("arch")
	h.Host.Arch = p.str()
	if p.opt("cpu") {
		h.Host.CPU = p.nonEmpty()
	}
	if p.opt("kernel") {
		h.Host.Kernel = p.nonEmpty()
	}
	p.req("name")
	h.Host.Name = p.str()
	p.req("os")
	h.Host.OS = p.str()
	p.close()
	p.close()
}

func (p *fastParser) outcome(o *Outcome) {
	p.open()
	if p.opt("detail") {
		o.Detail = p.nonEmpty()
	}
	if p.opt("exit_code") {
		n := p.int()
		o.ExitCode = &n
	}
	p.req("status")
	o.Status = Status(p.str())
	p.close()
}
