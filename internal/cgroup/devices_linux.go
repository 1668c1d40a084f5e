package cgroup

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The eBPF instructions the device program is made of (linux/bpf.h).
const (
	bpfLdxW   = 0x61 // BPF_LDX | BPF_MEM | BPF_W
	bpfAndK   = 0x57 // BPF_ALU64 | BPF_AND | BPF_K
	bpfRshK   = 0x77 // BPF_ALU64 | BPF_RSH | BPF_K
	bpfMovK   = 0xb7 // BPF_ALU64 | BPF_MOV | BPF_K
	bpfMovX   = 0xbf // BPF_ALU64 | BPF_MOV | BPF_X
	bpfJneK   = 0x55 // BPF_JMP | BPF_JNE | BPF_K
	bpfExit   = 0x95 // BPF_JMP | BPF_EXIT
	devcgChar = 2    // BPF_DEVCG_DEV_CHAR
	devcgBlk  = 1    // BPF_DEVCG_DEV_BLOCK
)

type bpfInsn struct {
	op       uint8
	dst, src uint8
	off      int16
	imm      int32
}

func (i bpfInsn) bytes() []byte {
	b := make([]byte, 8)
	b[0] = i.op
	b[1] = i.dst&0xf | i.src<<4
	binary.LittleEndian.PutUint16(b[2:], uint16(i.off))
	binary.LittleEndian.PutUint32(b[4:], uint32(i.imm))
	return b
}

// deviceProgram assembles a BPF_PROG_TYPE_CGROUP_DEVICE program that
// returns 1 (allow) for a device matching one of allow and 0 otherwise.
// Its context is struct bpf_cgroup_dev_ctx { u32 access_type (access <<
// 16 | type); u32 major; u32 minor; }.
func deviceProgram(allow []Device) []bpfInsn {
	p := []bpfInsn{
		{op: bpfLdxW, dst: 2, src: 1, off: 0}, // r2 = access_type
		{op: bpfAndK, dst: 2, imm: 0xffff},    // r2 = type
		{op: bpfLdxW, dst: 3, src: 1, off: 0}, // r3 = access_type
		{op: bpfRshK, dst: 3, imm: 16},        // r3 = access
		{op: bpfLdxW, dst: 4, src: 1, off: 4}, // r4 = major
		{op: bpfLdxW, dst: 5, src: 1, off: 8}, // r5 = minor
	}
	for _, d := range allow {
		typ := int32(devcgChar)
		if d.Type == 'b' {
			typ = devcgBlk
		}
		var acc int32
		for _, c := range d.Access {
			acc |= map[rune]int32{'m': 1, 'r': 2, 'w': 4}[c]
		}
		var body []bpfInsn
		body = append(body,
			bpfInsn{op: bpfJneK, dst: 2, imm: typ},
			bpfInsn{op: bpfMovX, dst: 1, src: 3},
			bpfInsn{op: bpfAndK, dst: 1, imm: ^acc & 0xffff}, // an access the rule does not allow
			bpfInsn{op: bpfJneK, dst: 1, imm: 0},
		)
		if d.Major != Any {
			body = append(body, bpfInsn{op: bpfJneK, dst: 4, imm: int32(d.Major)})
		}
		if d.Minor != Any {
			body = append(body, bpfInsn{op: bpfJneK, dst: 5, imm: int32(d.Minor)})
		}
		body = append(body, bpfInsn{op: bpfMovK, dst: 0, imm: 1}, bpfInsn{op: bpfExit})
		// Every jump of the rule skips to its end: the next rule.
		for i := range body {
			if body[i].op == bpfJneK {
				body[i].off = int16(len(body) - i - 1)
			}
		}
		p = append(p, body...)
	}
	return append(p, bpfInsn{op: bpfMovK, dst: 0, imm: 0}, bpfInsn{op: bpfExit})
}

// attachDeviceProgram loads the device program for allow and attaches it
// to the unified hierarchy's group at dir, beside any an ancestor has
// (BPF_F_ALLOW_MULTI: a device is allowed only where every program on
// the way allows it, so a service manager's or a container runtime's
// rules still hold). The attachment holds the program for as long as the
// group exists.
func attachDeviceProgram(dir string, allow []Device) error {
	var code []byte
	for _, i := range deviceProgram(allow) {
		code = append(code, i.bytes()...)
	}
	prog, err := loadDeviceProgram(code, false)
	if err != nil {
		// Again with the verifier's log, for the error (a log too small
		// for what the verifier writes fails a load that would pass).
		if p2, err2 := loadDeviceProgram(code, true); err2 != nil {
			err = err2
		} else {
			unix.Close(int(p2))
		}
		return fmt.Errorf("cgroup: loading the device program for %s: %w", dir, err)
	}
	defer unix.Close(int(prog))
	cg, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	defer unix.Close(cg)
	attach := struct {
		targetFD, attachBPFFD, attachType, attachFlags, replaceBPFFD uint32
	}{targetFD: uint32(cg), attachBPFFD: uint32(prog), attachType: unix.BPF_CGROUP_DEVICE, attachFlags: unix.BPF_F_ALLOW_MULTI}
	if _, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_ATTACH, uintptr(unsafe.Pointer(&attach)), unsafe.Sizeof(attach)); errno != 0 {
		return fmt.Errorf("cgroup: attaching the device program to %s: %w", dir, errno)
	}
	return nil
}

// loadDeviceProgram loads code as a BPF_PROG_TYPE_CGROUP_DEVICE program,
// with the verifier's log in the error when withLog.
func loadDeviceProgram(code []byte, withLog bool) (uintptr, error) {
	license := []byte("GPL\x00")
	var logBuf []byte
	load := struct {
		progType, insnCnt uint32
		insns, license    uint64
		logLevel, logSize uint32
		logBuf            uint64
		kernVersion       uint32
		progFlags         uint32
		progName          [16]byte
		progIfindex       uint32
		expectedAttach    uint32
	}{
		progType: unix.BPF_PROG_TYPE_CGROUP_DEVICE, insnCnt: uint32(len(code) / 8),
		insns: uint64(uintptr(unsafe.Pointer(&code[0]))), license: uint64(uintptr(unsafe.Pointer(&license[0]))),
		expectedAttach: unix.BPF_CGROUP_DEVICE,
	}
	if withLog {
		logBuf = make([]byte, 1<<20)
		load.logLevel, load.logSize, load.logBuf = 1, uint32(len(logBuf)), uint64(uintptr(unsafe.Pointer(&logBuf[0])))
	}
	copy(load.progName[:], "sandbox_devices")
	prog, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(&load)), unsafe.Sizeof(load))
	runtime.KeepAlive(code)
	runtime.KeepAlive(license)
	runtime.KeepAlive(logBuf)
	if errno != 0 {
		if withLog {
			return 0, fmt.Errorf("%w (verifier: %s)", errno, cstr(logBuf))
		}
		return 0, errno
	}
	return prog, nil
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
