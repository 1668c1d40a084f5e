// Package volumetest gives tests a directory on a filesystem of their
// own that can share extents (XFS, whose reflinks volume.Snapshot and
// volume.MakeFrom use): a sparse image on a loop device, made and
// removed by the test. Linux only.
package volumetest
