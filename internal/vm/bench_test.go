//go:build linux

package vm

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/vm/boot"
	"github.com/opensubstrate/sandbox/internal/vm/wire"
)

// BenchmarkBoot compares, side by side, boot to the first command's
// output through the executor's machine (QEMU, agent hello, setup, one
// exec) with a raw `qemu-system-x86_64 -M microvm` boot of the same
// kernel and initramfs to the agent's first byte on its port. ms/boot is
// the mean; ns/op includes tearing the VM down.
//
//	go test -run '^$' -bench Boot -benchtime 8x ./internal/vm/
func BenchmarkBoot(b *testing.B) {
	im := image(b, "")
	b.Run("raw-qemu-to-agent-hello", func(b *testing.B) {
		var total time.Duration
		defer func() { b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/boot") }()
		for i := 0; i < b.N; i++ {
			dir := b.TempDir()
			sock := filepath.Join(dir, "a.sock")
			cmd := exec.Command("qemu-system-x86_64", "-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on", "-nodefaults", "-no-user-config",
				"-nographic", "-no-reboot", "-display", "none", "-m", "256M", "-smp", "1", "-accel", "tcg,tb-size=64", "-cpu", "max",
				"-kernel", im.Kernel, "-initrd", im.Initrd, "-append", Spec{Image: im}.cmdline(), "-serial", "file:"+filepath.Join(dir, "c"),
				"-chardev", "socket,id=a,path="+sock+",server=on,wait=off", "-device", "virtio-serial-device", "-device", "virtserialport,chardev=a,name="+wire.PortName)
			t0 := time.Now()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			var c net.Conn
			var err error
			for c == nil {
				if c, err = net.Dial("unix", sock); err != nil {
					c = nil
					time.Sleep(2 * time.Millisecond)
				}
			}
			c.SetDeadline(time.Now().Add(60 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err != nil {
				b.Fatal(err)
			}
			total += time.Since(t0)
			c.Close()
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	b.Run("executor-to-first-output", func(b *testing.B) {
		var total time.Duration
		defer func() { b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/boot") }()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			m := start(b, Spec{Image: im, Shares: shares(b, wire.Mount{Tag: "sys0", Path: "/usr", ReadOnly: true})})
			var out bytes.Buffer
			if st, err := m.Exec(context.Background(), wire.Command{Path: "/usr/bin/echo", Argv: []string{"echo", "hi"}, Dir: "/"}, nil, &out, nil, time.Second); err != nil || st.Code != 0 {
				b.Fatal(st, err)
			}
			total += time.Since(t0)
			m.Kill()
		}
	})
}

// BenchmarkExec is one command in a live guest (/usr/bin/true over 9p).
func BenchmarkExec(b *testing.B) {
	im := image(b, "")
	m := start(b, Spec{Image: im, Shares: shares(b, wire.Mount{Tag: "sys0", Path: "/usr", ReadOnly: true})})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if st, err := m.Exec(context.Background(), wire.Command{Path: "/usr/bin/true", Argv: []string{"true"}, Dir: "/"}, nil, nil, nil, time.Second); err != nil || st.Code != 0 {
			b.Fatal(st, err)
		}
	}
}

// BenchmarkSnapshot suspends a 512 MiB guest, 200 MiB of it written, to
// its memory image, and resumes it.
func BenchmarkSnapshot(b *testing.B) {
	im := image(b, "")
	var snapT, restT time.Duration
	var size int64
	defer func() {
		b.ReportMetric(float64(snapT.Milliseconds())/float64(b.N), "ms/snapshot")
		b.ReportMetric(float64(restT.Milliseconds())/float64(b.N), "ms/restore")
		b.ReportMetric(float64(size>>20), "MiB/image")
	}()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		spec := Spec{Image: im, MemoryMiB: 512}
		m := start(b, spec)
		sh := boot.ToolDir + "/sh"
		if st, err := m.Exec(context.Background(), wire.Command{Path: sh, Argv: []string{"sh", "-c", "dd if=/dev/urandom of=/tmp/fill bs=1M count=200 2>/dev/null"}, Env: []string{"PATH=" + boot.ToolDir}, Dir: "/"}, nil, nil, nil, time.Second); err != nil || st.Code != 0 {
			b.Fatal(st, err)
		}
		path := filepath.Join(b.TempDir(), "mem")
		b.StartTimer()
		t0 := time.Now()
		snap, err := m.Snapshot(context.Background(), path)
		if err != nil {
			b.Fatal(err)
		}
		snapT += time.Since(t0)
		size = snap.Size
		m.Kill()
		spec.Dir, spec.Incoming = b.TempDir(), path
		t0 = time.Now()
		r := start(b, spec)
		if _, err := r.ReadFile(context.Background(), "/tmp/fill", 1); err == nil {
			b.Fatal("read over its limit")
		}
		restT += time.Since(t0)
		r.Kill()
		os.Remove(path)
	}
}
