//go:build !linux

package agent

import (
	"fmt"
	"os"
)

// Main: the agent is a Linux guest's init.
func Main() {
	fmt.Fprintln(os.Stderr, "sandbox-vmagent: the guest agent runs inside a Linux guest only")
	os.Exit(2)
}
