package engine

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/image"
	"github.com/opensubstrate/sandbox/internal/manifest"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/vm/boot"
)

// Images and environments: the images native runs can have as their
// root, environment manifests, and the guest image S5 microVMs boot.

func images(g *cli.Globals) (image.Store, error) {
	d, err := g.StateDir()
	if err != nil {
		return image.Store{}, err
	}
	return image.Store{Dir: filepath.Join(d.Root, "images")}, nil
}

func imageCmd(g *cli.Globals) *cobra.Command {
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

func imageImportCmd(g *cli.Globals) *cobra.Command {
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
image that had it). On a terminal (and without --json), the layer bytes
read, their rate and the time left are drawn on stderr.`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := images(g)
			if err != nil {
				return err
			}
			var bar *cli.Progress
			if !asJSON {
				bar = cli.NewProgress(cmd.ErrOrStderr(), "image import", cli.Bytes, "", 0)
			}
			if bar != nil {
				s.Progress = func(done, total int64) {
					bar.SetTotal(total)
					bar.Set(done)
				}
			}
			imgs, err := s.Import(args[0], names...)
			bar.Done()
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(imgs)
			}
			for _, img := range imgs {
				fmt.Fprintf(cmd.OutOrStdout(), "imported %s %s: %d layers, %d entries, %s, root %s\n", shortID(img.ID), strings.Join(img.Names, ","), len(img.Layers), img.Files, cli.IBytes(uint64(img.Bytes)), img.Root)
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

func imageLsCmd(g *cli.Globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ls",
		Short: "List the imported images, newest first",
		Args:  cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := images(g)
			if err != nil {
				return err
			}
			all, err := s.List()
			if err != nil {
				return err
			}
			return cli.PrintList(cmd, asJSON, all, "ID\tNAMES\tLAYERS\tSIZE\tROOT\tIMPORTED", func(img image.Image) string {
				names := strings.Join(img.Names, ",")
				if names == "" {
					names = "-"
				}
				return fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s", shortID(img.ID), names, len(img.Layers), cli.IBytes(uint64(img.Bytes)), img.Root.Short(), img.Imported.Format("2006-01-02 15:04:05"))
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

func imageRmCmd(g *cli.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm IMAGE...",
		Short: "Remove imported images (and their root filesystems, where no other image has the same)",
		Long: `Remove imported images by name, ID or unique ID prefix. A run already
started in one keeps its root until it ends; a sealed run that names the
root still verifies (its attestation binds the address), but cannot be
run again here until the image is imported again.`,
		Args: cli.UsageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := images(g)
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

func imageVerifyCmd(g *cli.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "verify IMAGE",
		Short: "List an image's root filesystem again and check it is the one its address names",
		Args:  cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := images(g)
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

func manifestCmd(g *cli.Globals) *cobra.Command {
	var (
		out    string
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "manifest DEVCONTAINER.json",
		Short: "Read a devcontainer.json into a signed, content-addressed environment manifest",
		Long: `Read a devcontainer.json (comments and trailing commas as VS Code accepts
them; '-' reads standard input) and take its declarative subset to an
environment manifest: image, features and their options, containerEnv,
remoteEnv, containerUser, remoteUser, forwardPorts, workspaceFolder,
hostRequirements, name. $schema, customizations, portsAttributes,
otherPortsAttributes, shutdownAction, overrideCommand,
updateRemoteUserUID and waitFor are read and left out: they do not
change what runs.

Refused, each named, and nothing made: every command field
(postCreateCommand, onCreateCommand, updateContentCommand,
postStartCommand, postAttachCommand, initializeCommand, userEnvProbe),
every field that widens the sandbox or reaches the host (privileged,
capAdd, securityOpt, runArgs, mounts, workspaceMount, init, appPort,
build, dockerComposeFile, service, runServices, a "host:port" forward),
a ${...} variable in a value, and any field it does not know.

The manifest is canonical JSON, signed with this host's key; it prints
its address and whether it is pinned (its image and every feature
addressed by digest, name@sha256:...). --out FILE writes the signed
manifest.`,
		Args: cli.UsageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var b []byte
			var err error
			if args[0] == "-" {
				b, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), manifest.MaxSize+1))
			} else {
				b, err = cli.ReadDevcontainer(args[0])
			}
			if err != nil {
				return err
			}
			m, err := manifest.FromDevcontainer(b)
			if err != nil {
				// Bad input (exit 2), not a sealed record that failed.
				return cli.RefusedInput{Msg: fmt.Sprintf("%s: %v", args[0], err)}
			}
			_, k, err := g.HostKey()
			if err != nil {
				return err
			}
			s, err := manifest.Seal(m, k)
			if err != nil {
				return err
			}
			if out != "" {
				if err := safefile.Write(out, s.Envelope, 0o644); err != nil {
					return err
				}
			}
			if asJSON {
				return cli.PrintJSON(cmd.OutOrStdout(), s.Manifest)
			}
			pinned := "pinned: its image and every feature are addressed by digest"
			if !m.Pinned {
				pinned = "not pinned: its image or a feature is named by a tag, which can change under it"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s  %s\n", s.Addr, pinned)
			return nil
		},
	}
	c.Flags().StringVarP(&out, "out", "o", "", "write the signed manifest to FILE")
	c.Flags().BoolVar(&asJSON, "json", false, "print the manifest as JSON")
	return c
}

func vmCmd(g *cli.Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "vm",
		Short: "Build and check the guest image S5 microVMs boot",
		Long: `S5 runs (a unit with a 'kernel' grant, or --tier S5) boot a microVM of their
own on QEMU's microvm machine: a Debian kernel and the project's guest root
(an initramfs holding the guest agent, sandbox-vmagent, as /init, and the
kernel modules it needs), both named by content address in a manifest,
sandbox.vm/1. The default image lives in STATE/vm ($SANDBOX_VM_IMAGE
overrides it); 'sandbox doctor' says whether S5 is available and why.

docs/s5.md says what the guest sees and what each run records.`,
	}
	c.AddCommand(vmBuildCmd(g), vmCheckCmd(g))
	return c
}

func vmBuildCmd(g *cli.Globals) *cobra.Command {
	var kernel, agent, busybox, out string
	c := &cobra.Command{
		Use:   "build --kernel DIR",
		Short: "Build the S5 guest image from a Debian kernel package and the guest agent",
		Long: `Build the S5 guest image: DIR is a Debian kernel package unpacked with
'dpkg-deb -x' (linux-image-*-amd64; the cloud flavour has no 9p, which
storage grants need), holding boot/vmlinuz-* and lib/modules/*. The agent
is sandbox-vmagent beside this executable unless --agent names it
(build it with: CGO_ENABLED=0 go build -trimpath -o sandbox-vmagent
./cmd/sandbox-vmagent).

The image's kernel is the ELF inside the bzImage, which the guest enters
directly (its PVH entry point; taking it out of Debian's xz payload needs
the xz command); without either, the bzImage itself, which boots slower.
The build is reproducible: the same kernel and agent give the same
initramfs, and so the same addresses. It prints the manifest's address.
scripts/vm-image installs QEMU and fetches the kernel and busybox
(into .cache/vm); docs/s5.md has the whole setup.`,
		Args: cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kernel == "" {
				return errs.Usage{Err: fmt.Errorf("--kernel DIR is required: a Debian linux-image package unpacked with dpkg-deb -x")}
			}
			if agent == "" {
				self, err := os.Executable()
				if err != nil {
					return err
				}
				agent = filepath.Join(filepath.Dir(self), "sandbox-vmagent")
			}
			if out == "" {
				out = os.Getenv("SANDBOX_VM_IMAGE")
			}
			if out == "" {
				d, err := g.StateDir()
				if err != nil {
					return err
				}
				out = filepath.Join(d.Root, "vm")
			}
			im, err := boot.Build(kernel, agent, busybox, out)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\nkernel   %s (%s)\ninitramfs %s\nin %s\n", im.Addr, im.Manifest.Kernel, im.Manifest.Release, im.Manifest.Initrd, out)
			return nil
		},
	}
	c.Flags().StringVar(&kernel, "kernel", "", "a Debian linux-image package, unpacked (dpkg-deb -x)")
	c.Flags().StringVar(&agent, "agent", "", "the guest agent binary (default: sandbox-vmagent beside sandbox)")
	c.Flags().StringVar(&busybox, "busybox", "", "a static busybox to put in the guest's "+boot.ToolDir+" (Debian: busybox-static), for guests run without the host's /usr")
	c.Flags().StringVar(&out, "out", "", "where to write the image (default $SANDBOX_VM_IMAGE, else STATE/vm)")
	return c
}

func vmCheckCmd(g *cli.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "check [DIR]",
		Short: "Check the guest image's files against the addresses its manifest names",
		Args:  cli.UsageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := os.Getenv("SANDBOX_VM_IMAGE")
			if len(args) == 1 {
				dir = args[0]
			}
			if dir == "" {
				d, err := g.StateDir()
				if err != nil {
					return err
				}
				dir = filepath.Join(d.Root, "vm")
			}
			im, err := boot.Open(dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s ok\nkernel   %s (%s)\ninitramfs %s\n", im.Addr, im.Manifest.Kernel, im.Manifest.Release, im.Manifest.Initrd)
			return nil
		},
	}
}
