//go:build wasip1

// Command hello greets its arguments on stdout and says goodbye on stderr.
package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	who := "world"
	if len(os.Args) > 1 {
		who = strings.Join(os.Args[1:], " ")
	}
	fmt.Printf("hello, %s\n", who)
	fmt.Fprintln(os.Stderr, "goodbye")
}
