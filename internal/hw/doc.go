// Package hw describes the machine a run executes on, for the attestation:
// the host (name, OS, architecture, kernel, CPU model) and its compute
// devices. The proc root is a parameter, so tests read a fake tree.
package hw
