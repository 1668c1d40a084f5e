//go:build !linux

package nvidia

import "os"

type devno struct{ major, minor uint32 }

// sysStat: device numbers are read on Linux only; elsewhere no node is one.
func sysStat(fi os.FileInfo) (devno, bool) { return devno{}, false }
