package host

import (
	"context"
	"io"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/tier"
)

func benchImage(b *testing.B, c bool, name string) []byte {
	if c {
		return guestbuild.Read(b, guestbuild.C, name)
	}
	return guestbuild.Read(b, guestbuild.Go, name)
}

// BenchmarkTrivialGuest runs the same trivial guest as a sealed run (host
// API: instrument, broker, journal, seal, store) and under plain wazero,
// both with a warm compilation cache, side by side.
func BenchmarkTrivialGuest(b *testing.B) {
	for _, g := range []struct {
		name string
		c    bool
	}{{"c-hello", true}, {"go-hello", false}} {
		img := benchImage(b, g.c, g.name[len(g.name)-5:])
		b.Run(g.name+"/plain-wazero", func(b *testing.B) {
			ctx := context.Background()
			rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(wazero.NewCompilationCache()).WithCloseOnContextDone(true))
			defer rt.Close(ctx)
			wasi_snapshot_preview1.MustInstantiate(ctx, rt)
			c, err := rt.CompileModule(ctx, img)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				m, err := rt.InstantiateModule(ctx, c, wazero.NewModuleConfig().WithArgs("hello").WithStdout(io.Discard).WithName(""))
				if err != nil {
					b.Fatal(err)
				}
				m.Close(ctx)
			}
		})
		b.Run(g.name+"/sealed", func(b *testing.B) {
			h := newBenchHost(b)
			req := Request{Kind: tier.Wasm, Image: img, Entry: "hello", Args: []string{"hello"}, Grants: benchGrants(b)}
			h.Run(context.Background(), req) // warm the compilation cache
			b.ResetTimer()
			for b.Loop() {
				if _, err := h.Run(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSealedRunsParallel reports sealed runs per second with every
// core busy.
func BenchmarkSealedRunsParallel(b *testing.B) {
	img := benchImage(b, true, "hello")
	h := newBenchHost(b)
	req := Request{Kind: tier.Wasm, Image: img, Entry: "hello", Args: []string{"hello"}, Grants: benchGrants(b)}
	h.Run(context.Background(), req)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := h.Run(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
