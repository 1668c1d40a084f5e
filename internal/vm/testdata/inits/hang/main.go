// Command hang is a guest init that never answers the host: it boots and
// sleeps (the test of a guest agent that never says hello).
package main

import "time"

func main() {
	for {
		time.Sleep(time.Hour)
	}
}
