package llm

import (
	"bytes"
	"testing"
)

// BenchmarkScanOpenAIBody is the scanner alone (scanOpenAIBody) on the
// bodies of BenchmarkReadOpenAIBody: no read, no allocation.
func BenchmarkScanOpenAIBody(b *testing.B) {
	for _, bb := range scanBenchBodies {
		body := bytes.TrimSpace([]byte(bb.body))
		b.Run("body="+bb.name, func(b *testing.B) {
			var dst OpenAIBody
			var texts [4]string
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if !scanOpenAIBody(body, &dst, texts[:0]) {
					b.Fatal("scan failed")
				}
			}
		})
	}
}
