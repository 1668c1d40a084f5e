package host

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/addr"
)

// Program is a file a unit is made from (a native program, a module, a
// VM image's manifest), as a CommandLine's Read read it.
type Program struct {
	Bytes []byte
	// id is the file's identity (fileID), the same before and after it
	// was read; zero where it is not known, or the file changed as it
	// was read.
	id fileID
}

// programAddrs are the addresses of programs read before, by their
// files' identities: a run of the same file, unchanged since, is not
// hashed again (python3 is 6.8 MB here: 3 to 5 ms of BLAKE3 a run). A
// file's identity is its device, inode, size, and modification and
// change times in nanoseconds. Only a file of the host's system
// directories or of an image's root (readProgram), of root's and that
// no one else may write (idOf), has one: a write through a shared
// mapping moves neither time, and a guest's file system (a workspace's
// image) says whatever times its writer put there, so a file a tenant
// or a guest could write is hashed at every read. A write(2) moves the change time, which no caller can
// set; a file changed less than settleTime before it was read has no
// identity either: a file system's clock may tick coarsely enough (a
// jiffy, a second) for a second write to leave both times as the first
// set them. At most maxProgramAddrs are kept.
var (
	programAddrsMu sync.Mutex
	programAddrs   map[fileID]addr.Addr
)

const (
	maxProgramAddrs = 1 << 12
	settleTime      = 3 * time.Second
)

// programClock is the clock a file's times are held against (tests move
// it).
var programClock = time.Now

// imageAddr is the address of the bytes a request's unit is made from:
// kept from an earlier read of the same file, unchanged, or hashed now
// (and kept, where the file's identity is known).
func imageAddr(b []byte, id fileID) addr.Addr {
	if id.zero() {
		return addr.Of(b)
	}
	programAddrsMu.Lock()
	a, ok := programAddrs[id]
	programAddrsMu.Unlock()
	if ok {
		return a
	}
	a = addr.Of(b)
	programAddrsMu.Lock()
	if programAddrs == nil || len(programAddrs) >= maxProgramAddrs {
		programAddrs = map[fileID]addr.Addr{}
	}
	programAddrs[id] = a
	programAddrsMu.Unlock()
	return a
}

// readProgram reads at most limit bytes (and one more, so that a caller
// can tell a file over it) of the regular file f; with its identity
// where keep is set (a file of the host's system directories or of an
// image's root, which no run can write) and it did not change as it was
// read.
func readProgram(f *os.File, limit int64, keep bool) (Program, error) {
	before, err := f.Stat()
	if err != nil {
		return Program{}, err
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return Program{}, err
	}
	p := Program{Bytes: b}
	if !keep {
		return p, nil
	}
	if after, err := f.Stat(); err == nil {
		id := idOf(before)
		if id == idOf(after) && id.size == int64(len(b)) && programClock().UnixNano()-max(id.mtime, id.ctime) >= int64(settleTime) {
			p.id = id
		}
	}
	return p, nil
}
