// Package wire is the protocol between sandbox and its guest agent inside
// an S5 microVM, spoken over one virtio-serial port (there is no vsock on
// these machines).
//
// A frame is a 9-byte header — the payload's length (big-endian uint32),
// the frame's type (one byte) and the stream it belongs to (big-endian
// uint32) — and the payload. Control frames carry one JSON object; data
// frames carry raw bytes.
//
// Invariants:
//   - The host treats every frame from the guest as hostile input: a
//     length over MaxData, an unknown type or a control payload that is not
//     exactly one JSON object of the expected shape is an error naming
//     what was wrong and where, never a panic and never an allocation
//     larger than MaxData (FuzzRead).
//   - Streams are numbered by the host; the guest answers on the stream
//     it was asked on and opens none of its own, so a frame on a stream
//     the host did not open is refused.
package wire
