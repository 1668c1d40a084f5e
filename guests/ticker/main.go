//go:build wasip1

// Command ticker is a long run for parking: ticker N FILE writes N lines,
// each "I RANDOM TIME", to FILE (held open, written in order, so that its
// position matters) and to stdout, listing FILE's directory every 64
// lines through one directory handle held open throughout; then it reads
// FILE back and prints its size and SHA-256. Every line is several host
// calls (randomness, the clock, two writes): a park lands between them.
package main

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: ticker N FILE")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	f, err := os.OpenFile(os.Args[2], os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, err := os.Open(filepath.Dir(os.Args[2]))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for i := 0; i < n; i++ {
		var r [8]byte
		rand.Read(r[:])
		line := fmt.Sprintf("%d %x %d\n", i, r, time.Now().UnixNano())
		if _, err := f.WriteString(line); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Print(line)
		if i%64 == 63 {
			names, _ := dir.Readdirnames(1)
			fmt.Printf("listed %v\n", names)
		}
	}
	dir.Close()
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	b, err := os.ReadFile(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("file %d bytes %x\n", len(b), sha256.Sum256(b))
}
