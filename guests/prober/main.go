//go:build wasip1

// Command prober tries capabilities a unit might not have been granted and
// prints one line per attempt: "ok" or the error. It always exits 0, so a
// test can read every answer.
package main

import (
	"fmt"
	"net"
	"os"
	"unsafe"
)

//go:wasmimport sandbox_kv get
func kvGet(ns unsafe.Pointer, nsLen uint32, key unsafe.Pointer, keyLen uint32, buf unsafe.Pointer, bufCap uint32, lenOut unsafe.Pointer) uint32

//go:wasmimport sandbox_kv put
func kvPut(ns unsafe.Pointer, nsLen uint32, key unsafe.Pointer, keyLen uint32, val unsafe.Pointer, valLen uint32) uint32

func report(what string, err error) {
	if err != nil {
		fmt.Printf("%s: %v\n", what, err)
		return
	}
	fmt.Printf("%s: ok\n", what)
}

func kv(op, ns string) {
	n, k, v := []byte(ns), []byte("k"), []byte("v")
	buf := make([]byte, 8)
	var l uint32
	var e uint32
	if op == "get" {
		e = kvGet(unsafe.Pointer(&n[0]), uint32(len(n)), unsafe.Pointer(&k[0]), 1, unsafe.Pointer(&buf[0]), 8, unsafe.Pointer(&l))
	} else {
		e = kvPut(unsafe.Pointer(&n[0]), uint32(len(n)), unsafe.Pointer(&k[0]), 1, unsafe.Pointer(&v[0]), 1)
	}
	if e == 0 || (op == "get" && e == 44) {
		fmt.Printf("kv %s %s: ok\n", op, ns)
		return
	}
	fmt.Printf("kv %s %s: errno %d\n", op, ns, e)
}

func main() {
	_, err := os.ReadFile("/etc/passwd")
	report("read /etc/passwd", err)
	_, err = os.ReadFile("/etc/shadow")
	report("read /etc/shadow", err)
	report("write /tmp/prober", os.WriteFile("/tmp/prober", []byte("x"), 0o644))
	ents, err := os.ReadDir("/")
	if err == nil {
		names := []string{}
		for _, e := range ents {
			names = append(names, e.Name())
		}
		fmt.Printf("list /: %v\n", names)
	} else {
		report("list /", err)
	}
	for _, p := range os.Args[1:] {
		_, err := os.ReadFile(p)
		report("read "+p, err)
		report("write "+p+".new", os.WriteFile(p+".new", []byte("x"), 0o644))
	}
	_, err = net.Dial("tcp", "127.0.0.1:22")
	report("connect 127.0.0.1:22", err)
	kv("get", "secrets")
	kv("put", "secrets")
	fmt.Printf("env HOME=%q PATH=%q\n", os.Getenv("HOME"), os.Getenv("PATH"))
	fmt.Printf("args %q\n", os.Args)
}
