// Package nvml reads NVIDIA GPU energy (nvmlDeviceGetTotalEnergyConsumption,
// millijoules since the driver was loaded) as a meter.Source, and the
// identity of each GPU (model, driver, UUID) for the attestation.
//
// The library is reached through a narrow interface (Lib). The real
// implementation wraps github.com/NVIDIA/go-nvml, which needs cgo; it is
// built only with the "nvml" build tag (go build -tags nvml). Without the
// tag, or on a machine without libnvidia-ml, the source reports the
// no-library state and everything else runs. A counter that goes down is a
// driver reload, not a wrap: the span falls back to the Estimator.
package nvml
