//go:build wasip1

// Command conform is the program the executor conformance suite
// (internal/executor/executortest) runs at S2. With "print" it copies
// its stdin to stdout, writes "err" to stderr and exits 3; with "hang"
// it writes "ready" and then runs until it is stopped; with "open PATH"
// it tries to read PATH, says whether it could, and exits 0.
package main

import (
	"fmt"
	"io"
	"os"
)

var sink int

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "conform: want print, hang or open PATH")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "print":
		io.Copy(os.Stdout, os.Stdin)
		fmt.Fprintln(os.Stderr, "err")
		os.Exit(3)
	case "hang":
		fmt.Println("ready")
		for i := 0; ; i++ {
			sink = i
		}
	case "open":
		if len(os.Args) != 3 {
			os.Exit(2)
		}
		if _, err := os.ReadFile(os.Args[2]); err != nil {
			fmt.Println("refused")
			return
		}
		fmt.Println("read")
	default:
		os.Exit(2)
	}
}
