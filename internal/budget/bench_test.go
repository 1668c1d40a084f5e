package budget

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/jcp"
)

// BenchmarkReserve reserves from many callers at once (GOMAXPROCS times
// the parallelism), each reservation fsynced before Reserve returns
// (group commit), on a file in the benchmark's temporary directory.
func BenchmarkReserve(b *testing.B) {
	for _, par := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("callers=%d", par*runtime.GOMAXPROCS(0)), func(b *testing.B) {
			benchReserve(b, par)
		})
	}
}

func benchReserve(b *testing.B, par int) {
	path := filepath.Join(b.TempDir(), "ledger.jsonl")
	l, err := Open(path, trust(b), host(b), time.Now)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	tr := newTree(b, 1<<60, 1<<60, 1<<60, jcp.Caveats{})
	if err := l.Admit(tr.tokens()...); err != nil {
		b.Fatal(err)
	}
	p := path3(tr)
	b.SetParallelism(par)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.Reserve(Reservation{Path: p, UJ: cpu(1), Invocation: inv()}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reservations/s")
}

func path3(tr tree) []addr.Addr { return path(tr.g, tr.c, tr.r) }

// BenchmarkVerify replays a ledger of 20,000 entries (10,000
// reservations, each posted) from its bytes.
func BenchmarkVerify(b *testing.B) {
	tr := newTree(b, 1<<60, 1<<60, 1<<60, jcp.Caveats{})
	s := newState(trust(b))
	var log []byte
	add := func(e *entry) {
		if err := s.check(e); err != nil {
			b.Fatal(err)
		}
		line, err := e.marshal()
		if err != nil {
			b.Fatal(err)
		}
		s.step(e, line)
		log = append(append(log, line...), '\n')
	}
	for _, t := range tr.tokens() {
		add(&entry{op: opAdmit, tok: t})
	}
	for n := uint64(1); n <= 10_000; n++ {
		add(&entry{op: opReserve, n: n, path: path3(tr), uj: cpu(J), inv: inv(), at: now.UnixNano(), until: now.UnixNano()})
		add(&entry{op: opPost, n: n, uj: cpu(J / 2), run: inv()})
	}
	entries := s.size
	b.SetBytes(int64(len(log)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := Verify(log, nil, trust(b), nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(entries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}
