package record

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
)

// BenchmarkVerify: a record of execs with a suspension and a resumption
// every hundred; segments/s is what the goal counts.
func BenchmarkVerify(b *testing.B) {
	var buf bytes.Buffer
	hb, _ := jcs.Marshal(Header{Record: Domain, Unit: unit, Grants: grants})
	buf.Write(append(hb, '\n'))
	n := 100000
	for i := range n {
		var s Segment
		switch i % 100 {
		case 98:
			s = suspend(snapA)
		case 99:
			s = resume(snapA, 10)
		default:
			s = Segment{Kind: Executed, Attestation: addr.Of([]byte(fmt.Sprint(i)))}
		}
		sb, err := s.Bytes()
		if err != nil {
			b.Fatal(err)
		}
		buf.Write(append(sb, '\n'))
	}
	rec := buf.Bytes()
	b.SetBytes(int64(len(rec)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := VerifyBytes(rec); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "segments/s")
}
