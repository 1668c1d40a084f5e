//go:build wasip1

// Command spin never ends on its own.
package main

func main() {
	n := 0
	for {
		n++
	}
}
