// Command sandbox-vmagent is the init of sandbox's S5 guests: `sandbox vm
// build` puts it in the guest root as /init. It does nothing outside a VM.
package main

import "github.com/opensubstrate/sandbox/internal/vm/agent"

func main() { agent.Main() }
