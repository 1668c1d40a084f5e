//go:build !linux

package server

import (
	"errors"
	"net"
)

// peerUID: peer credentials are read on Linux only (SO_PEERCRED); off
// it no unix caller is known, so none is served.
func peerUID(*net.UnixConn) (int, error) {
	return -1, errors.New("server: peer credentials are read on Linux only")
}
