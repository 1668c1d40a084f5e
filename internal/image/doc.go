// Package image imports container images and keeps their root
// filesystems, content-addressed, for S1 runs to use as their root.
//
// An import reads an OCI image layout (a directory, or a tar archive of
// one) or a `docker save` archive (plain or gzip-compressed). Every
// object is checked against the digest that names it before it is used:
// the index's manifests, each manifest's config and layers (the bytes as
// stored), and each layer again once decompressed, against the config's
// rootfs.diff_ids. Nothing is trusted by name.
//
// Layers are applied in order into a private staging directory through
// an os.Root, so that no entry — whatever its name, whatever symlinks
// earlier entries planted — is written outside it. Whiteouts and opaque
// directories are honoured; device nodes, fifos and sockets are left out
// (a run has its own /dev) and counted; setuid and setgid bits are
// dropped. The result is listed (every path, its kind, mode, owner, size
// and BLAKE3 content address, or its link target) as canonical JSON,
// "sandbox.rootfs/1"; the listing's address is the root's address, and
// the directory is renamed to roots/ADDRESS. Two images with the same
// files share one root.
//
// Layout under the store's directory (STATE/images):
//
//	images/ID.json         one imported image: names, digests, config, root
//	roots/ADDR/            an unpacked root filesystem, read-only to runs
//	roots/ADDR.json        its listing, whose BLAKE3 address is ADDR
//	staging/               imports in progress (removed at the next import)
//
// An image's ID is its config's digest, as in Docker and OCI; a manifest
// digest, when the source gives one, resolves to it too.
package image
