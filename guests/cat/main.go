//go:build wasip1

// Command cat prints the files named by its arguments. With -w PATH TEXT it
// writes TEXT to PATH instead. Errors go to stderr and make the exit status 1.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "-w" {
		if err := os.WriteFile(os.Args[2], []byte(os.Args[3]), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "cat:", err)
			os.Exit(1)
		}
		return
	}
	status := 0
	for _, p := range os.Args[1:] {
		f, err := os.Open(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "cat:", err)
			status = 1
			continue
		}
		if _, err := io.Copy(os.Stdout, f); err != nil {
			fmt.Fprintln(os.Stderr, "cat:", err)
			status = 1
		}
		f.Close()
	}
	os.Exit(status)
}
