package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/internal/image"
)

func (g *globals) images() (image.Store, error) {
	d, err := g.stateDir()
	if err != nil {
		return image.Store{}, err
	}
	return image.Store{Dir: filepath.Join(d.Root, "images")}, nil
}

func imageCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "image",
		Short: "Import, list, check and remove the images native runs can have as their root",
		Long: `An imported image's root filesystem replaces the host's system directories
in an S1 run: 'sandbox run --image NAME -- CMD' (and 'sandbox create
--image NAME') runs CMD with the image's directories, read-only, as its
/usr, /etc, /bin, ..., under the same confinement and after the same
probe, run inside that root. The unit binds the root filesystem by
address (the BLAKE3 address of its listing, sandbox.rootfs/1), and so
does every attestation of a run in it.

Images live in the state directory (STATE/images); nothing is pulled
from a registry: 'docker save', 'skopeo copy ... oci:DIR' or any OCI
image layout is the source. docs/images.md says what is checked.`,
	}
	c.AddCommand(imageImportCmd(g), imageLsCmd(g), imageRmCmd(g), imageVerifyCmd(g))
	return c
}

func imageImportCmd(g *globals) *cobra.Command {
	var names []string
	var asJSON bool
	c := &cobra.Command{
		Use:   "import SOURCE",
		Short: "Import the images of an OCI image layout or a docker save archive",
		Long: `Import every image SOURCE holds: an OCI image layout (a directory, or a tar
archive of one) or a 'docker save' archive, plain or gzip-compressed.

Every object is checked against the digest that names it before it is
used: the index's manifests, each manifest's config and layers as
stored, and each layer once decompressed against the config's diff_ids.
Layers are applied in order (whiteouts and opaque directories honoured)
with no write outside the image's root, whatever the entries' names or
the symlinks earlier entries made; device nodes, fifos and sockets are
left out, setuid and setgid bits dropped (both counted). An entry whose
path goes through a symlink that leaves the root is refused.

A failure keeps nothing. --name adds a name (a name moves from the
image that had it).`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.images()
			if err != nil {
				return err
			}
			imgs, err := s.Import(args[0], names...)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(imgs)
			}
			for _, img := range imgs {
				fmt.Fprintf(cmd.OutOrStdout(), "imported %s %s: %d layers, %d entries, %s, root %s\n", shortID(img.ID), strings.Join(img.Names, ","), len(img.Layers), img.Files, humanize.IBytes(uint64(img.Bytes)), img.Root)
				if img.Stats.Special > 0 || img.Stats.SetID > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "sandbox: %s: left out %d device nodes, fifos or sockets; dropped %d setuid/setgid bits\n", shortID(img.ID), img.Stats.Special, img.Stats.SetID)
				}
			}
			return nil
		},
	}
	c.Flags().StringArrayVar(&names, "name", nil, "add this name to the imported image (repeatable)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the imported images as a JSON array")
	return c
}

func shortID(id string) string {
	h := strings.TrimPrefix(id, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}

func imageLsCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ls",
		Short: "List the imported images, newest first",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.images()
			if err != nil {
				return err
			}
			all, err := s.List()
			if err != nil {
				return err
			}
			return printList(cmd, asJSON, all, "ID\tNAMES\tLAYERS\tSIZE\tROOT\tIMPORTED", func(img image.Image) string {
				names := strings.Join(img.Names, ",")
				if names == "" {
					names = "-"
				}
				return fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s", shortID(img.ID), names, len(img.Layers), humanize.IBytes(uint64(img.Bytes)), img.Root.Short(), img.Imported.Format("2006-01-02 15:04:05"))
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

func imageRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm IMAGE...",
		Short: "Remove imported images (and their root filesystems, where no other image has the same)",
		Long: `Remove imported images by name, ID or unique ID prefix. A run already
started in one keeps its root until it ends; a sealed run that names the
root still verifies (its attestation binds the address), but cannot be
run again here until the image is imported again.`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.images()
			if err != nil {
				return err
			}
			for _, ref := range args {
				img, err := s.Remove(ref)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", shortID(img.ID))
			}
			return nil
		},
	}
}

func imageVerifyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "verify IMAGE",
		Short: "List an image's root filesystem again and check it is the one its address names",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.images()
			if err != nil {
				return err
			}
			img, err := s.Resolve(args[0])
			if err != nil {
				return err
			}
			if err := s.Verify(img); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "OK %s root %s (%d entries)\n", shortID(img.ID), img.Root, img.Files)
			return nil
		},
	}
}
