// Package unit is the unit of work in canonical form: what runs (the image
// by content address, its kind, entry, arguments and environment), which
// device classes it asks for, and which grant set it runs under (by
// address).
//
// A Unit's canonical JSON is its identity: its content address is what the
// receipt, the attestation and a run record bind. Two units that differ in
// any argument, environment variable or grant are different units. The
// environment is exactly what the unit states; nothing of the host's
// environment enters a unit implicitly.
package unit
