package s3blobs

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DefaultRegion is the region a URL without region= names: the one
// S3-compatible servers accept when they have no regions.
const DefaultRegion = "us-east-1"

// maxPrefix bounds a prefix so that every key (prefix, "blobs/", 64 hex
// digits) stays well inside S3's 1,024 bytes.
const maxPrefix = 512

// ErrConfig is wrapped by every error ParseURL returns, and by New's
// for a Config it cannot use.
var ErrConfig = errors.New("bad s3 blob store configuration")

// Config says where a blob store is and how to reach it. ParseURL
// makes one from a URL; New checks it before it is used.
type Config struct {
	// Endpoint is the server's base URL: http or https, a host and an
	// optional port, no path ("http://127.0.0.1:9000").
	Endpoint string
	// Bucket is the bucket, which must exist.
	Bucket string
	// Prefix is put before every key: "" or segments each ending in
	// "/" ("team/sandbox/").
	Prefix string
	// Region signs requests; "" is DefaultRegion.
	Region string
	// PathStyle puts the bucket in the path (http://host/bucket/key),
	// as most servers other than AWS want; false puts it in the host
	// name where that can work (bucket.host), as AWS wants.
	PathStyle bool

	// AccessKeyID and SecretAccessKey sign requests; Open takes them
	// from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Neither is in
	// URL or in any error.
	AccessKeyID     string
	SecretAccessKey string
	// SessionToken goes with temporary credentials (AWS_SESSION_TOKEN).
	SessionToken string

	// MaxSize lowers the bound on a blob, in bytes, put or read; 0 is
	// MaxBlob, and more than MaxBlob is refused.
	MaxSize int64
	// HTTPClient carries the requests; nil is the S3 client's own
	// (a custom one sets TLS roots or proxies).
	HTTPClient *http.Client
}

// ParseURL reads s3://BUCKET[/PREFIX]?endpoint=URL[&region=R][&path-style=true|false].
// The credentials are not in it: they never belong in a URL, which ends
// up in logs and command lines.
func ParseURL(raw string) (Config, error) {
	var c Config
	shown := fmt.Sprintf("URL %q", clip(raw))
	if strings.Contains(raw, "@") {
		shown = `URL with "@" (not shown: it may hold credentials)`
	}
	u, err := url.Parse(raw)
	if err != nil {
		return c, fmt.Errorf("%w: %s: syntax: %v", ErrConfig, shown, inner(err))
	}
	bad := func(field, format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: %s: %s: %s", ErrConfig, shown, field, fmt.Sprintf(format, args...))
	}
	switch {
	case u.Scheme != "s3":
		return bad("scheme", "%q, want s3://BUCKET[/PREFIX]?endpoint=URL", u.Scheme)
	case u.Opaque != "":
		return bad("bucket", "missing: want s3://BUCKET[/PREFIX]?endpoint=URL")
	case u.User != nil:
		return bad("credentials", "not taken from a URL: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return bad("fragment", "a store URL has none")
	}
	c.Bucket = u.Host
	if u.Port() != "" || strings.HasSuffix(u.Host, ":") {
		return bad("bucket", "%q: a bucket has no port (the server goes in endpoint=)", u.Host)
	}
	if u.RawPath != "" {
		return bad("prefix", "%q: want letters, digits, '.', '_' and '-' between the slashes, unescaped", clip(u.RawPath))
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		c.Prefix = strings.TrimSuffix(p, "/") + "/"
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query", "%v", err)
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		v := q[k]
		if len(v) > 1 {
			return bad(k, "given %d times", len(v))
		}
		switch k {
		case "endpoint":
			c.Endpoint = v[0]
		case "region":
			c.Region = v[0]
		case "path-style":
			switch v[0] {
			case "true":
				c.PathStyle = true
			case "false":
			default:
				return bad("path-style", "%q, want true or false", v[0])
			}
		default:
			return bad("query", "unknown parameter %q (want endpoint, region, path-style)", k)
		}
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if field, err := c.check(); err != nil {
		return bad(field, "%v", err)
	}
	return c, nil
}

// URL is the URL ParseURL reads back to c (but for its credentials,
// size bound and HTTP client, which no URL holds).
func (c Config) URL() string {
	q := url.Values{"endpoint": {c.Endpoint}}
	if c.Region != "" {
		q.Set("region", c.Region)
	}
	if c.PathStyle {
		q.Set("path-style", "true")
	}
	// ':' and '/' need no escaping in a query, and read better bare.
	query := strings.NewReplacer("%3A", ":", "%2F", "/").Replace(q.Encode())
	u := url.URL{Scheme: "s3", Host: c.Bucket, Path: "/" + c.Prefix, RawQuery: query}
	if c.Prefix == "" {
		u.Path = ""
	}
	return u.String()
}

// check says which field of c is wrong, and how.
func (c Config) check() (field string, err error) {
	if err := checkBucket(c.Bucket); err != nil {
		return "bucket", err
	}
	if err := checkPrefix(c.Prefix); err != nil {
		return "prefix", err
	}
	if err := checkEndpoint(c.Endpoint); err != nil {
		return "endpoint", err
	}
	if err := checkRegion(c.Region); err != nil {
		return "region", err
	}
	if c.MaxSize < 0 || c.MaxSize > MaxBlob {
		return "MaxSize", fmt.Errorf("%d, want 0 to %d", c.MaxSize, MaxBlob)
	}
	return "", nil
}

// checkBucket applies S3's rules for bucket names: 3 to 63 lower-case
// letters, digits, dots and hyphens, starting and ending with a letter or
// digit, no "..", and not an IPv4 address.
func checkBucket(b string) error {
	switch {
	case b == "":
		return errors.New("missing: want s3://BUCKET[/PREFIX]?endpoint=URL")
	case len(b) < 3 || len(b) > 63:
		return fmt.Errorf("%q is %d characters, want 3 to 63", clip(b), len(b))
	case !alnum(b[0]) || !alnum(b[len(b)-1]):
		return fmt.Errorf("%q must start and end with a lower-case letter or a digit", b)
	case strings.Contains(b, ".."):
		return fmt.Errorf("%q has \"..\"", b)
	case net.ParseIP(b) != nil:
		return fmt.Errorf("%q is an IP address", b)
	}
	for i := 0; i < len(b); i++ {
		if !alnum(b[i]) && b[i] != '.' && b[i] != '-' {
			return fmt.Errorf("%q has %q: want lower-case letters, digits, '.' and '-'", b, b[i])
		}
	}
	return nil
}

func alnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

// checkPrefix takes "" or segments of letters, digits, '.', '_' and '-',
// each ending in "/", none "." or "..": a prefix maps to a directory on
// servers that keep objects as files, and must not escape it.
func checkPrefix(p string) error {
	if p == "" {
		return nil
	}
	if len(p) > maxPrefix {
		return fmt.Errorf("%d bytes, at most %d", len(p), maxPrefix)
	}
	if !strings.HasSuffix(p, "/") {
		return fmt.Errorf("%q does not end in \"/\"", clip(p))
	}
	for _, s := range strings.Split(strings.TrimSuffix(p, "/"), "/") {
		switch s {
		case "":
			return fmt.Errorf("%q has an empty segment", clip(p))
		case ".", "..":
			return fmt.Errorf("%q has a %q segment", clip(p), s)
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; !alnum(c) && !('A' <= c && c <= 'Z') && c != '.' && c != '_' && c != '-' {
				return fmt.Errorf("%q has %q: want letters, digits, '.', '_' and '-' between the slashes", clip(p), c)
			}
		}
	}
	return nil
}

// checkEndpoint takes http or https, a host, an optional port, nothing
// else.
func checkEndpoint(e string) error {
	if e == "" {
		return errors.New("missing: want endpoint=http://HOST:PORT")
	}
	u, err := url.Parse(e)
	if err != nil {
		if strings.Contains(e, "@") {
			return fmt.Errorf("not a URL: %v", inner(err))
		}
		return fmt.Errorf("%q: %v", clip(e), inner(err))
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: scheme %q, want http or https", clip(e), u.Scheme)
	case u.Opaque != "" || u.Hostname() == "":
		return fmt.Errorf("%q has no host", clip(e))
	case u.User != nil:
		return fmt.Errorf("%q has credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", u.Redacted())
	case u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(e, "#"):
		return fmt.Errorf("%q: want only scheme://HOST[:PORT]", clip(e))
	case e != u.Scheme+"://"+u.Host:
		return fmt.Errorf("%q: want it written %s://%s", clip(e), u.Scheme, u.Host)
	}
	for _, r := range u.Hostname() {
		if r <= ' ' || r == 0x7f || r >= utf8.RuneSelf {
			return fmt.Errorf("%q: the host has %q", clip(e), r)
		}
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 || p[0] == '0' {
			return fmt.Errorf("%q: port %q, want 1 to 65535", clip(e), p)
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return fmt.Errorf("%q: an empty port", clip(e))
	}
	return nil
}

// checkRegion takes lower-case letters, digits and hyphens ("" is
// DefaultRegion).
func checkRegion(r string) error {
	if len(r) > 64 {
		return fmt.Errorf("%d characters, at most 64", len(r))
	}
	for i := 0; i < len(r); i++ {
		if !alnum(r[i]) && r[i] != '-' {
			return fmt.Errorf("%q has %q: want lower-case letters, digits and '-'", clip(r), r[i])
		}
	}
	return nil
}

// inner is what url.Parse says is wrong, without the URL (which may hold
// a password).
func inner(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// clip shortens what is quoted back in an error.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
