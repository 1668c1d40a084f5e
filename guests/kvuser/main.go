//go:build wasip1

// Command kvuser counts its runs in the key-value store: it reads the key
// "count" in the namespace given as its argument (default "cache"), adds
// one, writes it back, and prints the new value.
package main

import (
	"fmt"
	"os"
	"strconv"
	"unsafe"
)

//go:wasmimport sandbox_kv get
func kvGet(ns unsafe.Pointer, nsLen uint32, key unsafe.Pointer, keyLen uint32, buf unsafe.Pointer, bufCap uint32, lenOut unsafe.Pointer) uint32

//go:wasmimport sandbox_kv put
func kvPut(ns unsafe.Pointer, nsLen uint32, key unsafe.Pointer, keyLen uint32, val unsafe.Pointer, valLen uint32) uint32

func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func main() {
	ns := []byte("cache")
	if len(os.Args) > 1 {
		ns = []byte(os.Args[1])
	}
	key := []byte("count")
	buf := make([]byte, 64)
	var n uint32
	count := 0
	switch e := kvGet(ptr(ns), uint32(len(ns)), ptr(key), uint32(len(key)), ptr(buf), uint32(len(buf)), unsafe.Pointer(&n)); e {
	case 0:
		count, _ = strconv.Atoi(string(buf[:n]))
	case 44: // ENOENT: the first run
	default:
		fmt.Fprintf(os.Stderr, "kvuser: get %s/count: errno %d\n", ns, e)
		os.Exit(1)
	}
	count++
	val := []byte(strconv.Itoa(count))
	if e := kvPut(ptr(ns), uint32(len(ns)), ptr(key), uint32(len(key)), ptr(val), uint32(len(val))); e != 0 {
		fmt.Fprintf(os.Stderr, "kvuser: put %s/count: errno %d\n", ns, e)
		os.Exit(1)
	}
	fmt.Println(count)
}
