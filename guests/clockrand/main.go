//go:build wasip1

// Command clockrand prints the time and 16 random bytes: nondeterministic
// inputs, real only when granted.
package main

import (
	"crypto/rand"
	"fmt"
	"time"
)

func main() {
	var b [16]byte
	rand.Read(b[:])
	fmt.Printf("time %s\nrandom %x\n", time.Now().UTC().Format(time.RFC3339Nano), b)
}
