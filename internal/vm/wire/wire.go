package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Type is a frame's type.
//
// Setup may come again after a Quiesce (a resumed snapshot): the agent
// mounts what is not mounted.
type Type byte

// The frame types. Host→guest: Setup, Exec, Stdin, Signal, ReadFile,
// WriteFile, FileData (writes), FileEnd (writes). Guest→host: Hello,
// Ready, Stdout, Stderr, Exit, FileData (reads), FileEnd (reads), Done.
const (
	Hello     Type = 1  // guest: {"kernel":…, "agent":…}, stream 0
	Setup     Type = 2  // host: Config, stream 0
	Ready     Type = 3  // guest: Status, stream 0
	Exec      Type = 4  // host: Command
	Stdin     Type = 5  // host: data; an empty payload closes stdin
	Signal    Type = 6  // host: {"signal":N}
	Stdout    Type = 7  // guest: data
	Stderr    Type = 8  // guest: data
	Exit      Type = 9  // guest: ExitStatus
	ReadFile  Type = 10 // host: File
	WriteFile Type = 11 // host: File
	FileData  Type = 12 // either: data
	FileEnd   Type = 13 // either: Status
	Done      Type = 14 // guest: Status (a write's end)
	Quiesce   Type = 15 // host: {}, stream 0: unmount every share (answered by Ready)
	maxType        = Quiesce
)

var names = [...]string{"", "hello", "setup", "ready", "exec", "stdin", "signal", "stdout", "stderr", "exit", "read-file", "write-file", "file-data", "file-end", "done", "quiesce"}

func (t Type) String() string {
	if t >= 1 && t <= maxType {
		return names[t]
	}
	return fmt.Sprintf("type-%d", byte(t))
}

// Control says whether frames of type t carry a JSON object.
func (t Type) Control() bool {
	switch t {
	case Stdin, Stdout, Stderr, FileData:
		return false
	}
	return true
}

// PortName is the virtio-serial port the agent is reached on (QEMU), and
// VsockPort the vsock port it listens on in a VM that has a vsock device
// and no virtio-serial (Firecracker).
const (
	PortName  = "sandbox.agent"
	VsockPort = 1024
)

// MaxData is the largest payload a frame may carry.
const MaxData = 1 << 20

// HeaderSize is the size of a frame's header.
const HeaderSize = 9

// Frame is one message.
type Frame struct {
	Type   Type
	Stream uint32
	Data   []byte
}

// ErrFrame is wrapped by every error about a malformed frame.
var ErrFrame = errors.New("wire: malformed frame")

// Write writes f as one frame.
func Write(w io.Writer, f Frame) error {
	if len(f.Data) > MaxData {
		return fmt.Errorf("%w: %s payload of %d bytes is over %d", ErrFrame, f.Type, len(f.Data), MaxData)
	}
	b := make([]byte, HeaderSize+len(f.Data))
	binary.BigEndian.PutUint32(b, uint32(len(f.Data)))
	b[4] = byte(f.Type)
	binary.BigEndian.PutUint32(b[5:], f.Stream)
	copy(b[HeaderSize:], f.Data)
	_, err := w.Write(b)
	return err
}

// WriteJSON writes a control frame carrying v.
func WriteJSON(w io.Writer, t Type, stream uint32, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return Write(w, Frame{Type: t, Stream: stream, Data: b})
}

// Read reads one frame. io.EOF means the other end closed between
// frames; io.ErrUnexpectedEOF, in the middle of one.
func Read(r io.Reader) (Frame, error) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(h[:])
	t := Type(h[4])
	f := Frame{Type: t, Stream: binary.BigEndian.Uint32(h[5:])}
	if t < 1 || t > maxType {
		return f, fmt.Errorf("%w: unknown type %d on stream %d", ErrFrame, h[4], f.Stream)
	}
	if n > MaxData {
		return f, fmt.Errorf("%w: %s frame on stream %d says %d bytes, over %d", ErrFrame, t, f.Stream, n, MaxData)
	}
	f.Data = make([]byte, n)
	if _, err := io.ReadFull(r, f.Data); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return f, err
	}
	if t.Control() && !isObject(f.Data) {
		return f, fmt.Errorf("%w: %s frame on stream %d does not carry a JSON object", ErrFrame, t, f.Stream)
	}
	return f, nil
}

func isObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) >= 2 && b[0] == '{' && json.Valid(b)
}

// Decode decodes a control frame's payload into v, refusing unknown
// fields.
func Decode(f Frame, v any) error {
	d := json.NewDecoder(bytes.NewReader(f.Data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: %s frame on stream %d: %v", ErrFrame, f.Type, f.Stream, err)
	}
	if d.More() {
		return fmt.Errorf("%w: %s frame on stream %d: more than one value", ErrFrame, f.Type, f.Stream)
	}
	return nil
}

// HelloMsg is the agent's first frame.
type HelloMsg struct {
	Kernel string `json:"kernel"` // uname -r inside the guest
	Agent  string `json:"agent"`
}

// Mount is a host directory shared into the guest over 9p, at the same
// absolute path.
type Mount struct {
	Tag      string `json:"tag"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"ro"`
	// Owner, for a read-write share, is who the guest sees owning its
	// top directory (the user runs are), so that they can write in it
	// (the share keeps it in extended attributes, not on the host's
	// file); 0 for as it is.
	Owner uint32 `json:"owner,omitempty"`
}

// Net configures the guest's one network interface, which reaches only
// the run's egress proxy.
type Net struct {
	Addr    string `json:"addr"`    // the guest's address with prefix, 10.0.2.15/24
	Gateway string `json:"gateway"` // slirp's
	Proxy   string `json:"proxy"`   // http://host:port, set as the runs' proxy
}

// Config is the Setup frame: what the agent mounts and configures before
// it runs anything.
type Config struct {
	Mounts   []Mount `json:"mounts"`
	Net      *Net    `json:"net,omitempty"`
	Hostname string  `json:"hostname"`
}

// Status ends a setup or a file operation; Error is "" on success.
type Status struct {
	Error string `json:"error,omitempty"`
	// Errno is the guest's errno for the failure, 0 if none.
	Errno int `json:"errno,omitempty"`
}

// Command is an Exec frame.
type Command struct {
	// Path is the program executed; Argv its arguments, Argv[0]
	// included.
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// UID and GID are who it runs as in the guest (0: the guest's root,
	// which owns the agent).
	UID uint32 `json:"uid,omitempty"`
	GID uint32 `json:"gid,omitempty"`
	// Pids bounds its processes and threads (a cgroup in the guest); 0
	// for no bound.
	Pids int64 `json:"pids,omitempty"`
}

// ExitStatus ends an exec: Code when it exited, Signal when a signal
// ended it, Error (with Errno) when it could not be started.
type ExitStatus struct {
	Code   int    `json:"code"`
	Signal int    `json:"signal,omitempty"`
	Error  string `json:"error,omitempty"`
	Errno  int    `json:"errno,omitempty"`
}

// SignalMsg is a Signal frame.
type SignalMsg struct {
	Signal int `json:"signal"`
}

// File is a ReadFile or WriteFile frame.
type File struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode,omitempty"`
	// Parents makes a write create the file's missing directories.
	Parents bool `json:"parents,omitempty"`
}
