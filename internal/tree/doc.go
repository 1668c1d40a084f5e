// Package tree captures a directory (a live sandbox's workspace) as a
// content-addressed tree in the blob store, and restores it.
//
// A tree is a canonical JSON document ("sandbox.tree/1") listing every
// entry under the directory in path order: directories, regular files
// (their size and the addresses of their chunks, each at most ChunkSize
// bytes) and symbolic links (their target, as text). Chunks and the tree
// are blobs, stored once by address, so a second capture of a directory
// that changed a little stores only the chunks that changed; a file whose
// inode, size, mtime and ctime are those of the last capture is not read
// again (the guest can set mtime, not ctime).
//
// Invariants:
//   - Every byte under the directory was written by the guest: nothing
//     is followed (symlinks are recorded, not resolved); special files
//     (devices, fifos, sockets) are left out and listed (Stats.Skipped);
//     paths over MaxPath are refused by name; any other name is kept,
//     as the hex of its bytes where it is not UTF-8; permissions keep
//     only the 0777 bits (no setuid, setgid or sticky bit is ever
//     restored).
//   - Restore writes into a directory it makes, entry by entry, with
//     openat under it and O_NOFOLLOW, symlinks last: no write goes
//     through a link. Every chunk is checked against its address as it
//     is read back; a tree that does not parse, or names a chunk that
//     is missing or corrupt, fails the restore, which removes what it
//     made.
package tree
