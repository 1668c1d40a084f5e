package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/vm/boot"
)

func vmCmd(g *globals) *cobra.Command {
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

func vmBuildCmd(g *globals) *cobra.Command {
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

The build is reproducible: the same kernel and agent give the same
initramfs, and so the same addresses. It prints the manifest's address.
scripts/vm-image installs QEMU and fetches the kernel and busybox
(into .cache/vm); docs/s5.md has the whole setup.`,
		Args: usageArgs(cobra.NoArgs),
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
				d, err := g.stateDir()
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

func vmCheckCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "check [DIR]",
		Short: "Check the guest image's files against the addresses its manifest names",
		Args:  usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := os.Getenv("SANDBOX_VM_IMAGE")
			if len(args) == 1 {
				dir = args[0]
			}
			if dir == "" {
				d, err := g.stateDir()
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
