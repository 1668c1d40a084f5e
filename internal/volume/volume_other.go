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

// PoolReserve is what an auto-sized pool leaves free on a filesystem of
// size bytes: a tenth of it, at least 1 GiB.
func PoolReserve(size int64) int64 { return max(size/10, 1<<30) }

// PoolOf says dir lies in no pool: none is made here.
func PoolOf(dir string) string { return "" }

// ReleasePool does nothing: no pool is made here.
func ReleasePool(dir string) error { return nil }

// Reflinks refuses: volumes need Linux.
func Reflinks(dir string) error { return ErrNoClone }
