// Package nvidia finds a host's NVIDIA GPUs at the device edge: the
// device nodes (/dev/nvidia[0-9]+, /dev/nvidiactl, /dev/nvidia-uvm,
// /dev/nvidia-uvm-tools, /dev/nvidia-modeset) with their device numbers
// from stat, each GPU's model, UUID and bus from
// /proc/driver/nvidia/gpus/*/information, the driver's version from
// /proc/driver/nvidia/version, and the driver's user-space libraries
// (libcuda.so*, libnvidia-*.so*, ...) in the library directories ldconfig
// is configured with.
//
// Every path is read beneath a root given as a parameter ("/" in
// production), so tests run on a fake tree with fake nodes made by mknod.
// Discover is the probe: it returns a host only when the control node,
// at least one GPU node and the driver's version are all there, and
// otherwise an error wrapping ErrNoDevice that says what is missing. It
// reads; it never opens a device node.
package nvidia
