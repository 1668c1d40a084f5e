//go:build !linux

package volume

// Probe says volumes need Linux.
func Probe() error { return ErrNotSupported }

// Make refuses: volumes need Linux.
func Make(dir string, size int64) error {
	if err := checkSize(size); err != nil {
		return err
	}
	return ErrNotSupported
}

// Release does nothing: no volume is made here.
func Release(dir string) error { return nil }

// Attach does nothing: no volume is made here.
func Attach(dir string) (bool, error) { return false, nil }

// Of says no volume is mounted on dir.
func Of(dir string) (Usage, bool, error) { return Usage{}, false, nil }

// Snapshot refuses: volumes need Linux.
func Snapshot(dir, img string) error { return ErrNoClone }

// MakeFrom refuses: volumes need Linux.
func MakeFrom(dir, img string) error { return ErrNoClone }

// Pool refuses: volumes need Linux.
func Pool(dir string, size int64) error { return ErrNotSupported }

// MountPool refuses: volumes need Linux.
func MountPool(dir string) error { return ErrNotSupported }

// ReleasePool does nothing: no pool is made here.
func ReleasePool(dir string) error { return nil }

// Reflinks refuses: volumes need Linux.
func Reflinks(dir string) error { return ErrNoClone }
