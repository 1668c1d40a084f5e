// Package netns reaches into a sandbox's network namespace from the
// host: Dial makes a connection whose socket belongs to that namespace,
// as a process inside it would, and hands it to the caller in the
// service's own. S1 (internal/native) dials a sandbox's own loopback in
// the namespace its init holds; S5 (internal/vm) dials the forwarding
// its VM's monitor listens with, in the namespace the monitor jail made
// for it (internal/confine).
//
// It sits below the backends beside internal/confine, and apart from it
// because it links net, which the S1 helper does not.
//
// Invariants:
//   - The dialling thread enters the namespace for the connect only; a
//     thread that cannot go back to the service's namespace is never
//     given back to the Go runtime.
//   - The namespace is used through its own descriptor's reference: a
//     Close racing a dial cannot give its number to another sandbox's.
//   - A connect is bounded by DialTimeout and by the caller's context.
package netns
