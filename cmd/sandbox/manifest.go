package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/internal/manifest"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

func manifestCmd(g *globals) *cobra.Command {
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
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var b []byte
			var err error
			if args[0] == "-" {
				b, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), manifest.MaxSize+1))
			} else {
				b, err = readDevcontainer(args[0])
			}
			if err != nil {
				return err
			}
			m, err := manifest.FromDevcontainer(b)
			if err != nil {
				// Bad input (exit 2), not a sealed record that failed.
				return refusedInput{fmt.Sprintf("%s: %v", args[0], err)}
			}
			_, k, err := g.hostKey()
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
				return printJSON(cmd.OutOrStdout(), s.Manifest)
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

// readDevcontainer reads file up to one byte over manifest.MaxSize:
// enough for the reader to refuse it, naming the bound, without reading
// a file of any size whole.
func readDevcontainer(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, manifest.MaxSize+1))
}

// signedManifest is the signed manifest file holds: as it is, when it is
// one; else read as a devcontainer.json and signed with this host's key.
// Either is read up to manifest.MaxSize.
func signedManifest(g *globals, file string) ([]byte, error) {
	b, err := readDevcontainer(file)
	if err != nil {
		return nil, err
	}
	if s, err := manifest.Verify(b, key.Trust{}); s != nil && (err == nil || errors.Is(err, reject.UntrustedKey)) {
		return b, nil // the service decides whom it trusts
	}
	m, err := manifest.FromDevcontainer(b)
	if err != nil {
		return nil, refusedInput{fmt.Sprintf("%s: %v", file, err)}
	}
	_, k, err := g.hostKey()
	if err != nil {
		return nil, err
	}
	s, err := manifest.Seal(m, k)
	if err != nil {
		return nil, err
	}
	return s.Envelope, nil
}

// refusedInput is input refused as it stands: a usage-class failure,
// whatever the reader's own codes say.
type refusedInput struct{ msg string }

func (e refusedInput) Error() string { return e.msg }

// Invalid: the input is refused.
func (refusedInput) Invalid() bool { return true }
