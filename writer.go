package ratelimit

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// statusWriter records the status of a response, so that settlement can
// tell a failed call (not 2xx) from a successful one. It lives inside
// the request's reqState (no allocation of its own). It keeps the
// optional interfaces streaming and upgrades need: http.Flusher (and
// FlushError), http.Hijacker, io.ReaderFrom, and Unwrap for
// http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	status int // the final status (≥ 200) written, or 0
	// state, when set, learns the final status from WriteHeader before
	// the status leaves: a failed call's release then goes out with the
	// response's rate-limit fields (Limiter.releaseEarly).
	state *reqState
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
		if w.state != nil {
			w.state.lim.releaseEarly(w.state)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// ReadFrom keeps the underlying writer's io.ReaderFrom (sendfile) path.
func (w *statusWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return io.Copy(w.ResponseWriter, r)
}

// Flush sends buffered data to the client: server-sent events need it.
func (w *statusWriter) Flush() {
	_ = w.FlushError()
}

// FlushError is Flush with an error, as http.ResponseController calls it.
func (w *statusWriter) FlushError() error {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	switch f := w.ResponseWriter.(type) {
	case interface{ FlushError() error }:
		return f.FlushError()
	case http.Flusher:
		f.Flush()
		return nil
	default: // perhaps a wrapper with Unwrap
		return http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// Hijack hands the connection over (WebSocket upgrades); it fails with
// http.ErrNotSupported when the underlying writer cannot.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
