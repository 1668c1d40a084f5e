//go:build wasip1

// Command membomb allocates memory until it is refused.
package main

import "fmt"

var keep [][]byte

func main() {
	for i := 0; ; i++ {
		b := make([]byte, 16<<20)
		for j := range b {
			b[j] = byte(j)
		}
		keep = append(keep, b)
		fmt.Printf("%d MiB\n", (i+1)*16)
	}
}
