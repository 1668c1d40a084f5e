// Package volume bounds a directory's size while it is written: the
// directory becomes the mount point of a filesystem of its own (ext4, in
// a sparse image file beside it, dir.img, on a loop device), so that a
// writer past the bound gets ENOSPC from the kernel at the write, at
// every tier whose workspace is a host directory (S1's bind, S2's host
// calls, S5's 9p share alike).
//
// Invariants: Make mounts only on an empty directory it is given, and
// removes what it made if any step fails; Release unmounts a volume
// only where its image is beside the directory, and removes the image;
// the image is sparse (it takes on disk what is written, not the bound);
// the loop device is released with the last unmount (autoclear). Linux
// and root only: elsewhere Probe says why (ErrNotSupported).
//
// A pool (Pool) is where volumes are made when the filesystem they would
// lie on cannot share extents: an XFS filesystem with reflinks in a
// sparse image of its own, so that Snapshot and MakeFrom copy no data
// on any host. It is the host's and outlives its maker; Pool refuses a
// mount point holding another filesystem, a size above what is free
// under it, and names another user made first (where anyone may write),
// and Attach mounts a volume's pool again before the volume, refusing a
// directory or image that is not this user's alone.
package volume
