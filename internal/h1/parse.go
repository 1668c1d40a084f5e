package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Bounds on a response's head.
const (
	maxHeaderBytes = 1 << 20 // the head of one response, all its lines
	maxFields      = 512     // fields in one head
	maxInterim     = 16      // 1xx responses before the final one
)

// readResponse reads a response's head from br, skipping interim (1xx)
// responses, and returns the response, the reader of its body, and
// whether the connection may carry another request after the body.
func readResponse(br *bufio.Reader, method string) (*Response, io.Reader, bool, error) {
	for interim := 0; ; interim++ {
		budget := maxHeaderBytes
		line, err := readLine(br, &budget)
		if err != nil {
			return nil, nil, false, fmt.Errorf("h1: the response's status line: %w", err)
		}
		resp, minor, err := parseStatus(line)
		if err != nil {
			return nil, nil, false, err
		}
		for {
			line, err := readLine(br, &budget)
			if err != nil {
				return nil, nil, false, fmt.Errorf("h1: the response's header: %w", err)
			}
			if len(line) == 0 {
				break
			}
			if len(resp.Header) == maxFields {
				return nil, nil, false, fmt.Errorf("h1: the response's header has more than %d fields", maxFields)
			}
			f, err := parseField(line)
			if err != nil {
				return nil, nil, false, err
			}
			resp.Header = append(resp.Header, f)
		}
		if resp.Status >= 100 && resp.Status < 200 {
			if resp.Status == 101 {
				return nil, nil, false, errors.New("h1: the server switched protocols, which no request asked for")
			}
			if interim == maxInterim {
				return nil, nil, false, fmt.Errorf("h1: more than %d interim responses", maxInterim)
			}
			continue
		}
		r, keep, err := framing(br, resp, method)
		if err != nil {
			return nil, nil, false, err
		}
		if minor == 0 || hasToken(resp.Header.values("Connection"), "close") {
			keep = false
		}
		return resp, r, keep, nil
	}
}

// readLine is the next line of br without its line ending (CRLF, or a
// bare LF), charged to budget.
func readLine(br *bufio.Reader, budget *int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, fmt.Errorf("a line longer than %d bytes", readBuffer)
	}
	if err == io.EOF {
		return nil, io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, err
	}
	if *budget -= len(line); *budget < 0 {
		return nil, fmt.Errorf("a head longer than %d bytes", maxHeaderBytes)
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// parseStatus reads a status line: HTTP/1.x, a space, three digits, and
// a reason phrase after a space (which may be empty).
func parseStatus(line []byte) (*Response, int, error) {
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return nil, 0, fmt.Errorf("h1: %q is not an HTTP/1.x status line", clip(line))
	}
	minor := int(line[7]) - '0'
	if minor < 0 || minor > 9 {
		return nil, 0, fmt.Errorf("h1: %q is not an HTTP/1.x status line", clip(line))
	}
	status := 0
	for _, d := range line[9:12] {
		if d < '0' || d > '9' {
			return nil, 0, fmt.Errorf("h1: status %q is not three digits", clip(line[9:12]))
		}
		status = status*10 + int(d-'0')
	}
	if status < 100 {
		return nil, 0, fmt.Errorf("h1: status %d is not one HTTP has", status)
	}
	reason := ""
	if len(line) > 13 {
		reason = string(line[13:])
		if !isFieldValue(reason) {
			return nil, 0, errors.New("h1: the status line's reason holds a control character")
		}
	}
	return &Response{Status: status, Reason: reason, Length: -1}, minor, nil
}

// parseField reads a header field line: a token, a colon, a value
// without control characters (spaces around it dropped). A line that
// continues the one before (obsolete folding) is refused.
func parseField(line []byte) (Field, error) {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return Field{}, fmt.Errorf("h1: header line %q is not NAME: VALUE", clip(line))
	}
	name := string(line[:colon])
	if !isToken(name) {
		return Field{}, fmt.Errorf("h1: header name %q is not a token", clip(line[:colon]))
	}
	value := string(bytes.Trim(line[colon+1:], " \t"))
	if !isFieldValue(value) {
		return Field{}, fmt.Errorf("h1: header %s holds a control character", name)
	}
	return Field{name, value}, nil
}

// framing is how the body of resp is delimited (RFC 9112, 6.3), and
// whether the connection outlives it.
func framing(br *bufio.Reader, resp *Response, method string) (io.Reader, bool, error) {
	te := resp.Header.values("Transfer-Encoding")
	cl := resp.Header.values("Content-Length")
	if method == "HEAD" || resp.Status == 204 || resp.Status == 304 {
		resp.Length = 0
		return eof{}, true, nil
	}
	if len(te) > 0 {
		if len(cl) > 0 {
			return nil, false, errors.New("h1: the response has both Transfer-Encoding and Content-Length")
		}
		if len(te) != 1 || !equalFold(te[0], "chunked") {
			return nil, false, fmt.Errorf("h1: transfer coding %q: only chunked is read", clip([]byte(te[0])))
		}
		return &chunked{br: br}, true, nil
	}
	if len(cl) > 0 {
		n, err := parseLength(cl[0])
		if err != nil {
			return nil, false, err
		}
		for _, v := range cl[1:] {
			if v != cl[0] {
				return nil, false, fmt.Errorf("h1: Content-Length %q and %q disagree", clip([]byte(cl[0])), clip([]byte(v)))
			}
		}
		resp.Length = n
		return &fixed{br: br, left: n}, true, nil
	}
	return br, false, nil // until the server closes the connection
}

// parseLength reads a Content-Length: decimal digits alone.
func parseLength(s string) (int64, error) {
	if s == "" || len(s) > 18 {
		return 0, fmt.Errorf("h1: Content-Length %q is not a length", clip([]byte(s)))
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("h1: Content-Length %q is not a length", clip([]byte(s)))
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, nil
}

// eof is an empty body.
type eof struct{}

func (eof) Read([]byte) (int, error) { return 0, io.EOF }

// fixed is a body of a stated length.
type fixed struct {
	br   *bufio.Reader
	left int64
}

func (f *fixed) Read(p []byte) (int, error) {
	if f.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.br.Read(p)
	f.left -= int64(n)
	if err == io.EOF {
		err = fmt.Errorf("the connection ended %d bytes before the body did: %w", f.left, io.ErrUnexpectedEOF)
	}
	return n, err
}

// chunked is a chunked body: each chunk's size in hex (extensions after
// ';' ignored), its bytes and a line ending; the last of size 0, then
// trailer fields (read and dropped) and an empty line.
type chunked struct {
	br      *bufio.Reader
	left    int64 // of the chunk being read
	between bool  // a chunk's data was read: its line ending is next
	done    bool
	err     error
}

// maxChunk bounds a chunk's stated size (a size is read as it comes,
// not allocated).
const maxChunk = 1 << 40

func (c *chunked) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.done {
		return 0, io.EOF
	}
	if c.left == 0 {
		if err := c.next(); err != nil {
			c.err = err
			return 0, err
		}
		if c.done {
			return 0, io.EOF
		}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	c.left -= int64(n)
	if c.left == 0 {
		c.between = true
	}
	if err == io.EOF {
		err = fmt.Errorf("the connection ended inside a chunk: %w", io.ErrUnexpectedEOF)
	}
	if err != nil {
		c.err = err
	}
	return n, err
}

// next reads the line ending of the chunk before, then the next chunk's
// size (and the trailer, after the last).
func (c *chunked) next() error {
	budget := maxHeaderBytes
	if c.between {
		line, err := readLine(c.br, &budget)
		if err != nil {
			return fmt.Errorf("the end of a chunk: %w", err)
		}
		if len(line) != 0 {
			return fmt.Errorf("a chunk runs past its size into %q", clip(line))
		}
		c.between = false
	}
	line, err := readLine(c.br, &budget)
	if err != nil {
		return fmt.Errorf("a chunk's size: %w", err)
	}
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 16 {
		return fmt.Errorf("chunk size %q is not a size", clip(line))
	}
	size, err := strconv.ParseInt(string(line), 16, 64)
	if err != nil || size < 0 || size > maxChunk || line[0] == '+' || line[0] == '-' {
		return fmt.Errorf("chunk size %q is not a size", clip(line))
	}
	if size > 0 {
		c.left = size
		return nil
	}
	for fields := 0; ; fields++ {
		line, err := readLine(c.br, &budget)
		if err != nil {
			return fmt.Errorf("the body's trailer: %w", err)
		}
		if len(line) == 0 {
			c.done = true
			return nil
		}
		if fields == maxFields {
			return fmt.Errorf("a trailer of more than %d fields", maxFields)
		}
	}
}

// clip is at most 64 bytes of b, for an error.
func clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}

// isToken says whether s is an HTTP token (RFC 9110, 5.6.2).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// isVisible says whether s is visible ASCII, with no space.
func isVisible(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// isFieldValue says whether s holds no control character but a tab.
func isFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// equalFold compares ASCII strings in any case.
func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// hasToken says whether a comma-separated list among values holds tok
// (in any case).
func hasToken(values []string, tok string) bool {
	for _, v := range values {
		for _, t := range bytes.Split([]byte(v), []byte(",")) {
			if equalFold(string(bytes.TrimSpace(t)), tok) {
				return true
			}
		}
	}
	return false
}
