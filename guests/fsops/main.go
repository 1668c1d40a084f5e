//go:build wasip1

// Command fsops runs file operations named by its arguments and prints
// one line per operation, "OP PATH: ok" (with what was read) or
// "OP PATH: ERROR". It always exits 0, so a test can read every answer.
// The operations, each followed by its operands:
//
//	read PATH · write PATH DATA · append PATH DATA · mkdir PATH ·
//	rmdir PATH · unlink PATH · rename FROM TO · symlink TARGET LINK ·
//	chmod PATH OCTAL · stat PATH · truncate PATH SIZE
package main

import (
	"fmt"
	"os"
	"strconv"
)

func main() {
	args := os.Args[1:]
	for len(args) > 0 {
		op := args[0]
		n := map[string]int{"read": 1, "write": 2, "append": 2, "mkdir": 1, "rmdir": 1, "unlink": 1, "rename": 2, "symlink": 2, "chmod": 2, "stat": 1, "truncate": 2}[op]
		if n == 0 || len(args) < 1+n {
			fmt.Printf("%s: unknown operation or missing operands\n", op)
			return
		}
		a := args[1 : 1+n]
		args = args[1+n:]
		var err error
		var got string
		switch op {
		case "read":
			var b []byte
			b, err = os.ReadFile(a[0])
			got = " " + strconv.Quote(string(b))
		case "write":
			err = os.WriteFile(a[0], []byte(a[1]), 0o644)
		case "append":
			var f *os.File
			if f, err = os.OpenFile(a[0], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
				_, err = f.WriteString(a[1])
				f.Close()
			}
		case "mkdir":
			err = os.Mkdir(a[0], 0o755)
		case "rmdir", "unlink":
			err = os.Remove(a[0])
		case "rename":
			err = os.Rename(a[0], a[1])
		case "symlink":
			err = os.Symlink(a[0], a[1])
		case "chmod":
			var m uint64
			if m, err = strconv.ParseUint(a[1], 8, 32); err == nil {
				err = os.Chmod(a[0], os.FileMode(m))
			}
		case "stat":
			var fi os.FileInfo
			if fi, err = os.Stat(a[0]); err == nil {
				got = fmt.Sprintf(" %v %d", fi.Mode(), fi.Size())
			}
		case "truncate":
			var sz int64
			if sz, err = strconv.ParseInt(a[1], 10, 64); err == nil {
				err = os.Truncate(a[0], sz)
			}
		}
		if err != nil {
			fmt.Printf("%s %s: ERROR %v\n", op, a[0], err)
			continue
		}
		fmt.Printf("%s %s: ok%s\n", op, a[0], got)
	}
}
