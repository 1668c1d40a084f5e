// Package guestbuild builds the guest programs in guests/ from source, for
// tests, benchmarks and the demo: Go guests with GOOS=wasip1, C guests with
// clang and wasi-libc (Debian: clang-14, lld-14, wasi-libc,
// libclang-rt-14-dev-wasm32; scripts/deps installs them).
//
// Builds are cached by the hash of their sources and toolchain, under the
// user cache directory, so every test package shares one build; a cached
// file is written atomically, so concurrent builders never see half of one.
// Native programs are built as the tests are (no -trimpath), so that they
// reuse the packages the tests compiled: a -trimpath build compiles the
// standard library once more (about 25 CPU-seconds in a cold cache).
package guestbuild
