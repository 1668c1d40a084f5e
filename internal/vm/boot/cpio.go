package boot

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// entry is one file of an initramfs.
type entry struct {
	name   string // without a leading slash
	mode   uint32 // type and permission bits (S_IF*)
	data   []byte // a file's bytes, a link's target
	rmajor uint32
	rminor uint32
}

const (
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
	sIFCHR = 0o020000
)

// writeCpio writes entries as a newc archive, sorted by name, with every
// time, owner and inode number fixed, so that the same entries give the
// same bytes.
func writeCpio(w io.Writer, entries []entry) error {
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	off := 0
	put := func(b []byte) error {
		n, err := w.Write(b)
		off += n
		return err
	}
	pad := func() error {
		if r := off % 4; r != 0 {
			return put(make([]byte, 4-r))
		}
		return nil
	}
	for i, e := range append(entries, entry{name: "TRAILER!!!"}) {
		if strings.HasPrefix(e.name, "/") || strings.Contains(e.name, "..") {
			return fmt.Errorf("boot: bad initramfs entry %q", e.name)
		}
		nlink := 1
		if e.mode&0o170000 == sIFDIR {
			nlink = 2
		}
		ino := i + 1
		if e.name == "TRAILER!!!" {
			ino, nlink = 0, 1
		}
		hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, e.mode, 0, 0, nlink, 0, len(e.data), 0, 0, e.rmajor, e.rminor, len(e.name)+1, 0)
		if err := put([]byte(hdr)); err != nil {
			return err
		}
		if err := put(append([]byte(e.name), 0)); err != nil {
			return err
		}
		if err := pad(); err != nil {
			return err
		}
		if err := put(e.data); err != nil {
			return err
		}
		if err := pad(); err != nil {
			return err
		}
	}
	return nil
}
