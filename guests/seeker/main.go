//go:build linux

// Command seeker searches everything a confined program can read for a
// secret it is not told: its environment, its arguments, every file it
// can read that was written since SEEK_SINCE (the secret did not exist
// before; older files cannot hold it), and the environment, command line
// and readable memory of every process it can see. It knows only the
// secret's public prefix (SEEK_MARK) and the SHA-256 of the whole secret
// (SEEK_SHA256); a match is the prefix followed by 32 hex digits that
// hash to it. It prints what it searched and one FOUND line per hit, and
// exits 0.
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

var (
	mark   []byte
	target string
	found  int
)

// search reports every place in b where the secret is.
func search(where string, b []byte) {
	for off := 0; ; {
		i := bytes.Index(b[off:], mark)
		if i < 0 {
			return
		}
		start := off + i
		end := start + len(mark) + 32
		if end <= len(b) {
			sum := sha256.Sum256(b[start:end])
			if hex.EncodeToString(sum[:]) == target {
				fmt.Printf("FOUND in %s at %d\n", where, start)
				found++
			}
		}
		off = start + 1
	}
}

func main() {
	mark = []byte(os.Getenv("SEEK_MARK"))
	target = os.Getenv("SEEK_SHA256")
	since, _ := strconv.ParseInt(os.Getenv("SEEK_SINCE"), 10, 64)
	if len(mark) == 0 || len(target) != 64 {
		fmt.Println("seeker: SEEK_MARK and SEEK_SHA256 are required")
		os.Exit(2)
	}

	search("environment", []byte(strings.Join(os.Environ(), "\n")))
	search("arguments", []byte(strings.Join(os.Args, "\n")))

	var files, fileBytes int64
	filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (p == "/proc" || p == "/sys") {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Stat(p, &st) != nil {
			return nil
		}
		if st.Mtim.Nano() < since && st.Ctim.Nano() < since {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		files++
		fileBytes += int64(len(b))
		search("file "+p, b)
		return nil
	})

	var procs, memBytes int64
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range pids {
		procs++
		for _, f := range []string{"environ", "cmdline"} {
			if b, err := os.ReadFile(dir + "/" + f); err == nil {
				search(dir+"/"+f, b)
			}
		}
		maps, err := os.Open(dir + "/maps")
		if err != nil {
			continue
		}
		mem, err := os.Open(dir + "/mem")
		if err != nil {
			maps.Close()
			continue
		}
		sc := bufio.NewScanner(maps)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 2 || fields[1][0] != 'r' || strings.HasSuffix(sc.Text(), "[vvar]") || strings.HasSuffix(sc.Text(), "[vsyscall]") {
				continue
			}
			lo, hi, ok := strings.Cut(fields[0], "-")
			if !ok {
				continue
			}
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil || end <= start || end-start > 1<<30 {
				continue
			}
			buf := make([]byte, end-start)
			n, _ := mem.ReadAt(buf, int64(start))
			memBytes += int64(n)
			search(fmt.Sprintf("%s/mem %s", dir, fields[0]), buf[:n])
		}
		maps.Close()
		mem.Close()
	}
	fmt.Printf("searched: environment, arguments, %d files written since the secret existed (%d bytes), %d processes (%d bytes of memory)\n", files, fileBytes, procs, memBytes)
	fmt.Printf("found %d\n", found)
}
