//go:build !linux

package verify

import "os"

// readFile is os.ReadFile; readfile_linux.go says why Linux has its own.
func readFile(p string) ([]byte, error) { return os.ReadFile(p) }
