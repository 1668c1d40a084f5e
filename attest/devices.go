package attest

import (
	"fmt"

	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/reject"
)

// DevicesType is the type of an S6 or S7 run's device evidence file
// (evidence-devices.json): one line per device the run was given besides
// the CPU, each with its own evidence, never folded into the CPU's.
const DevicesType = "sandbox.device-evidence/1"

// MaxDevicesSize is the largest device evidence file read.
const MaxDevicesSize = 4 << 20

// Devices is the device evidence file.
type Devices struct {
	Type    string         `json:"type"`
	Devices []DeviceReport `json:"devices"`
}

// DeviceReport is one device's evidence: its class and identity (as the
// claim's hardware.devices names it), the kind of report (nvidia-spdm),
// the report (hex) and the certificate chain it is verified with (PEM).
// Its nonce is the first 32 bytes of the claim's Binding
// (DeviceNonce).
type DeviceReport struct {
	Class  device.Class `json:"class"`
	ID     string       `json:"id"`
	Kind   string       `json:"kind"`
	Report string       `json:"report"`
	Chain  string       `json:"chain"`
}

// DeviceNonce is the nonce a device's report must carry: the first 32
// bytes of the claim's binding (an SPDM request's nonce is 32 bytes).
func DeviceNonce(binding [64]byte) [32]byte {
	var n [32]byte
	copy(n[:], binding[:32])
	return n
}

// Encode is the file's canonical JSON.
func (d Devices) Encode() ([]byte, error) {
	d.Type = DevicesType
	if err := d.check(); err != nil {
		return nil, err
	}
	return jcs.Marshal(d)
}

// DecodeDevices reads a device evidence file from untrusted bytes.
func DecodeDevices(b []byte) (*Devices, error) {
	if len(b) > MaxDevicesSize {
		return nil, reject.New(reject.Invalid, "devices", "%d bytes; the limit is %d", len(b), MaxDevicesSize)
	}
	var d Devices
	if err := jcs.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	if d.Type != DevicesType {
		return nil, reject.New(reject.Unrecognised, "devices.type", "%q, want %q", d.Type, DevicesType)
	}
	if err := d.check(); err != nil {
		return nil, err
	}
	return &d, nil
}

func (d Devices) check() error {
	if len(d.Devices) == 0 {
		return reject.New(reject.MissingField, "devices.devices", "no device: a run given none has no device evidence file")
	}
	for i, r := range d.Devices {
		where := fmt.Sprintf("devices.devices[%d]", i)
		switch {
		case !r.Class.Valid() || r.Class == device.CPU:
			return reject.New(reject.Invalid, where+".class", "%q: a device besides the CPU", r.Class)
		case r.Kind == "" || r.Report == "" || r.Chain == "":
			return reject.New(reject.MissingField, where, "a device's evidence names its kind, its report and its chain")
		}
	}
	return nil
}
