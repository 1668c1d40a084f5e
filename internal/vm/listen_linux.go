package vm

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
)

// MaxNetTable bounds a guest's /proc/net/tcp or tcp6 as the host reads
// it (about 150 bytes a socket).
const MaxNetTable = 4 << 20

// Listening is how a guest listens on a TCP port, read from its
// /proc/net/tcp and /proc/net/tcp6 (ListeningOn).
type Listening struct {
	// Reachable: a listening socket on every address, or on the guest's
	// own (GuestIP), which QEMU's forwarding connects to.
	Reachable bool
	// Loopback: a listening socket on the guest's loopback, which the
	// forwarding does not reach.
	Loopback bool
}

// ListeningOn reads the guest's listening sockets on port from the
// text of its /proc/net/tcp (tcp) and /proc/net/tcp6 (tcp6; nil where
// the guest has no IPv6). Both are the guest's, so hostile: a line it
// cannot read is an error naming it, never a panic.
func ListeningOn(tcp, tcp6 []byte, port int) (Listening, error) {
	var l Listening
	guest := netip.MustParseAddr(GuestIP)
	for _, t := range [...]struct {
		name string
		b    []byte
		size int
	}{{"/proc/net/tcp", tcp, 4}, {"/proc/net/tcp6", tcp6, 16}} {
		// Line by line, nothing held but the line: a table of nothing
		// but newlines allocates nothing.
		for n, rest := 0, t.b; len(rest) > 0; n++ {
			var line []byte
			line, rest, _ = bytes.Cut(rest, []byte("\n"))
			if n == 0 || len(bytes.TrimSpace(line)) == 0 {
				continue // the header, or an empty line
			}
			var f [4][]byte
			nf := 0
			for rem := line; nf < len(f); nf++ {
				rem = bytes.TrimLeft(rem, " \t")
				if len(rem) == 0 {
					break
				}
				i := bytes.IndexAny(rem, " \t")
				if i < 0 {
					i = len(rem)
				}
				f[nf], rem = rem[:i], rem[i:]
			}
			if nf < 4 {
				return Listening{}, fmt.Errorf("%s line %d: %d fields, want at least 4", t.name, n+1, nf)
			}
			if len(f) < 4 {
				return Listening{}, fmt.Errorf("%s line %d: %d fields, want at least 4", t.name, n+1, len(f))
			}
			if string(f[3]) != "0A" { // TCP_LISTEN
				continue
			}
			a, p, err := socketAddr(f[1], t.size)
			if err != nil {
				return Listening{}, fmt.Errorf("%s line %d: local address %q: %w", t.name, n+1, f[1], err)
			}
			if p != port {
				continue
			}
			switch a = a.Unmap(); {
			case a.IsUnspecified() || a == guest:
				l.Reachable = true
			case a.IsLoopback():
				l.Loopback = true
			}
		}
	}
	return l, nil
}

// socketAddr decodes a /proc/net/tcp address, "ADDR:PORT" in hex: the
// address as the kernel holds it (32-bit words, each in the guest's
// byte order, x86's little endian), the port as a number.
func socketAddr(s []byte, size int) (netip.Addr, int, error) {
	h, ps, ok := bytes.Cut(s, []byte(":"))
	if !ok || len(h) != 2*size || len(ps) != 4 {
		return netip.Addr{}, 0, fmt.Errorf("want %d hex digits, a colon and 4", 2*size)
	}
	b := make([]byte, size)
	if _, err := hex.Decode(b, h); err != nil {
		return netip.Addr{}, 0, err
	}
	for i := 0; i < size; i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	p, err := strconv.ParseUint(string(ps), 16, 16)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	a, _ := netip.AddrFromSlice(b)
	return a, int(p), nil
}
