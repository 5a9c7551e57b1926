package attribution

import (
	"bytes"
	"fmt"
	"testing"
)

func BenchmarkDecodeFrame(b *testing.B) {
	frame := frameBytes("0123456789abcdef0123456789abcdef")
	r := bytes.NewReader(nil)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r.Reset(frame)
		if _, err := DecodeFrame(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkByToken looks a token up among 10 000 active executions.
func BenchmarkByToken(b *testing.B) {
	reg := NewRegistry()
	var tok string
	for i := 0; i < 10000; i++ {
		_, t, err := reg.Register(ExecutionSpec{SessionID: fmt.Sprint("s", i), EnvironmentID: "e"})
		if err != nil {
			b.Fatal(err)
		}
		tok = t
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := reg.ByToken(tok); !ok {
			b.Fatal("token not found")
		}
	}
}
