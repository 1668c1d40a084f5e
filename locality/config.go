package locality

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"

	"github.com/opensubstrate/sandbox/reject"
)

// ConfigType is the type of a locality configuration.
const ConfigType = "sandbox.locality-config/1"

// MaxConfigSize is the largest configuration read.
const MaxConfigSize = 1 << 20

// Config is what a host (and a verifier) knows of locality: the anchors
// it trusts, each with where to reach it, and the named regions grants
// ask for (`locality:NAME`). A host measures against every anchor; a
// verifier uses the anchors' keys and positions, and the regions to
// check that a run's claim is for the region its grant named.
type Config struct {
	Type    string            `json:"type"`
	Anchors []ConfigAnchor    `json:"anchors"`
	Regions map[string]Region `json:"regions"`
}

// ConfigAnchor is a published anchor and the URL it answers at.
type ConfigAnchor struct {
	PublishedAnchor
	URL string `json:"url"`
}

// regionName says whether name is a region's name: 1 to 63 of a-z, 0-9,
// '.', '_' and '-', starting with a letter or digit. (A loop, not a
// regular expression: `{0,62}` compiled 63 copies of its class at every
// start of a program that links this package.)
func regionName(name string) bool {
	if len(name) == 0 || len(name) > 63 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// ParseConfig reads a configuration from untrusted bytes: its type,
// at least one anchor, each key once, each position and region in range,
// region names as grants write them, URLs http or https.
func ParseConfig(b []byte) (*Config, error) {
	if len(b) > MaxConfigSize {
		return nil, reject.New(reject.Invalid, "locality config", "%d bytes; the limit is %d", len(b), MaxConfigSize)
	}
	var c Config
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return nil, reject.Wrap(reject.Malformed, "locality config", err)
	}
	if d.More() {
		return nil, reject.New(reject.Malformed, "locality config", "trailing data after the object")
	}
	if c.Type != ConfigType {
		return nil, reject.New(reject.Unrecognised, "locality config.type", "%q, want %q", c.Type, ConfigType)
	}
	if len(c.Anchors) == 0 {
		return nil, reject.New(reject.MissingField, "locality config.anchors", "no anchor: a locality claim needs at least one")
	}
	seen := map[string]bool{}
	for i, a := range c.Anchors {
		where := fmt.Sprintf("locality config.anchors[%d]", i)
		if seen[a.Key.String()] {
			return nil, reject.New(reject.DuplicateKey, where+".key", "%s twice", a.Key)
		}
		seen[a.Key.String()] = true
		if err := a.Position.check(where + ".position"); err != nil {
			return nil, err
		}
		u, err := url.Parse(a.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, reject.New(reject.Invalid, where+".url", "%q: want http(s)://HOST[:PORT]", a.URL)
		}
	}
	for name, r := range c.Regions {
		if !regionName(name) {
			return nil, reject.New(reject.Invalid, "locality config.regions", "%q is not a region name (lower-case letters, digits, . _ -)", name)
		}
		if err := r.check("locality config.regions." + name); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// Published is the configuration's anchors as a verifier is given them.
func (c *Config) Published() []PublishedAnchor {
	out := make([]PublishedAnchor, len(c.Anchors))
	for i, a := range c.Anchors {
		out[i] = a.PublishedAnchor
	}
	return out
}

// RegionNames lists the configured regions, sorted.
func (c *Config) RegionNames() []string {
	var out []string
	for n := range c.Regions {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
