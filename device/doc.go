// Package device names the classes of compute device a unit of work can be
// granted, metered on and attested for: Cpu, Simd, Gpu, Npu, Tpu, Lpu,
// Photonic and Quantum.
//
// The list is closed and ordered; records list classes in this order, so the
// same set has one encoding. ParseClass accepts any letter case
// ("gpu", "GPU"); String and the wire form use the canonical spelling.
package device
