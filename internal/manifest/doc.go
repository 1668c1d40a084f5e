// Package manifest reads a devcontainer.json (JSONC: comments and
// trailing commas, as VS Code accepts them) and takes its declarative
// subset to an environment manifest (seed 000, C7): canonical JSON,
// content-addressed, signed by the host.
//
// Taken: image, features (each with its options, as the strings its
// install script is given), containerEnv, remoteEnv, containerUser,
// remoteUser, forwardPorts (port numbers), workspaceFolder,
// hostRequirements (cpus, memory, storage, gpu), name. Read and left out,
// because they do not change what runs: $schema, customizations (editor
// settings), portsAttributes, otherPortsAttributes, shutdownAction,
// overrideCommand, updateRemoteUserUID, waitFor.
//
// Refused, naming the field: every command (postCreateCommand,
// onCreateCommand, updateContentCommand, postStartCommand,
// postAttachCommand, initializeCommand, userEnvProbe: a manifest runs
// nothing), every field that widens the sandbox or reaches the host
// (privileged, capAdd, securityOpt, runArgs, mounts, workspaceMount,
// init, appPort, build, dockerComposeFile, service, runServices, a
// "host:port" forward), a ${…} variable in a value (devcontainer tools
// resolve them from the host), and every field this package does not
// know. A file that does not parse is refused at the line and column of
// the byte at fault; a member named twice, at any depth, by its path; a
// file over MaxSize (1 MiB) whole. hostRequirements that require
// nothing are left out of the manifest.
//
// A manifest is pinned only when its image and every feature are
// addressed by digest (name@sha256:<64 hex>): anything else can change
// under the same name (seed 003).
package manifest
