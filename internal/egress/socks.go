package egress

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

// SOCKS5 reply codes (RFC 1928 §6).
const (
	socksOK          = 0x00
	socksNotAllowed  = 0x02
	socksUnreachable = 0x04
	socksRefused     = 0x05
	socksNoCommand   = 0x07
	socksNoAddrType  = 0x08
)

var errSOCKS = errors.New("socks5")

// socksRequest reads a SOCKS5 greeting and CONNECT request from r,
// answering the greeting on w (no authentication). It returns the
// destination. Anything else (another version, no acceptable method,
// BIND or UDP ASSOCIATE, a malformed request) is an error, answered as
// RFC 1928 says where the protocol allows.
func socksRequest(r *bufio.Reader, w io.Writer) (host string, port int, err error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", 0, fmt.Errorf("%w: greeting: %v", errSOCKS, err)
	}
	if hdr[0] != 5 {
		return "", 0, fmt.Errorf("%w: version %d", errSOCKS, hdr[0])
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, methods); err != nil {
		return "", 0, fmt.Errorf("%w: methods: %v", errSOCKS, err)
	}
	noAuth := false
	for _, m := range methods {
		noAuth = noAuth || m == 0
	}
	if !noAuth {
		w.Write([]byte{5, 0xff})
		return "", 0, fmt.Errorf("%w: the client offers no method without authentication", errSOCKS)
	}
	if _, err := w.Write([]byte{5, 0}); err != nil {
		return "", 0, err
	}
	var req [4]byte
	if _, err := io.ReadFull(r, req[:]); err != nil {
		return "", 0, fmt.Errorf("%w: request: %v", errSOCKS, err)
	}
	if req[0] != 5 {
		return "", 0, fmt.Errorf("%w: request version %d", errSOCKS, req[0])
	}
	switch req[3] {
	case 1:
		var a [4]byte
		if _, err := io.ReadFull(r, a[:]); err != nil {
			return "", 0, fmt.Errorf("%w: address: %v", errSOCKS, err)
		}
		host = net.IP(a[:]).String()
	case 4:
		var a [16]byte
		if _, err := io.ReadFull(r, a[:]); err != nil {
			return "", 0, fmt.Errorf("%w: address: %v", errSOCKS, err)
		}
		host = net.IP(a[:]).String()
	case 3:
		n, err := r.ReadByte()
		if err != nil {
			return "", 0, fmt.Errorf("%w: name length: %v", errSOCKS, err)
		}
		name := make([]byte, n)
		if _, err := io.ReadFull(r, name); err != nil {
			return "", 0, fmt.Errorf("%w: name: %v", errSOCKS, err)
		}
		if n == 0 {
			socksReply(w, socksNoAddrType)
			return "", 0, fmt.Errorf("%w: empty name", errSOCKS)
		}
		host = string(name)
	default:
		socksReply(w, socksNoAddrType)
		return "", 0, fmt.Errorf("%w: address type %d", errSOCKS, req[3])
	}
	var p [2]byte
	if _, err := io.ReadFull(r, p[:]); err != nil {
		return "", 0, fmt.Errorf("%w: port: %v", errSOCKS, err)
	}
	if req[1] != 1 {
		socksReply(w, socksNoCommand)
		return "", 0, fmt.Errorf("%w: command %d (only CONNECT is supported)", errSOCKS, req[1])
	}
	port = int(binary.BigEndian.Uint16(p[:]))
	if port == 0 {
		socksReply(w, socksNotAllowed)
		return "", 0, fmt.Errorf("%w: port 0", errSOCKS)
	}
	return host, port, nil
}

// socksReply answers a request with code and an unspecified bound address.
func socksReply(w io.Writer, code byte) error {
	_, err := w.Write([]byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0})
	return err
}
