// Package adapters holds one file per rate-limiting library. Each file
// registers its decider.Specs (and, where the library ships one, its HTTP
// middlewares) from init(); importing the package registers them all. To
// add a library, copy the shape of any file here (redisrate.go is the
// smallest) into a new file. rampmeter.go drives this repository's own
// module (through the replace directive of ../go.mod).
package adapters

import (
	"net"
	"net/http"
	"time"
)

// scratchWriter is a minimal http.ResponseWriter for libraries whose only
// decision API takes (w, r). The header map is reused (cleared per call by
// the adapter) so allocations reported are the library's own.
type scratchWriter struct {
	h    http.Header
	code int
}

func newScratchWriter() *scratchWriter { return &scratchWriter{h: make(http.Header, 8)} }

func (w *scratchWriter) Header() http.Header         { return w.h }
func (w *scratchWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *scratchWriter) WriteHeader(code int)        { w.code = code }

// burstInt clamps the configured limit to an int burst.
func burstInt(limit int64) int {
	const maxBurst = 1 << 30
	if limit > maxBurst {
		return maxBurst
	}
	return int(limit)
}

// perSecond converts Limit/Period to events per second.
func perSecond(limit int64, period time.Duration) float64 {
	return float64(limit) / period.Seconds()
}

// remoteIP is what a hand-written middleware would key on.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// tooMany is the deny response of hand-written middlewares.
func tooMany(w http.ResponseWriter) {
	http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
}
