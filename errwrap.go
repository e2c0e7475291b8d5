package ratelimit

import "strings"

// errPrefix begins the message of every error of this package, once: an
// error that wraps another of the package's errors does not repeat it.
const errPrefix = "ratelimit: "

// wrappedError is an error that wraps several errors, with a message of its
// own.
type wrappedError struct {
	msg  string
	errs []error
}

func (e *wrappedError) Error() string   { return e.msg }
func (e *wrappedError) Unwrap() []error { return e.errs }

// wrap returns an error wrapping sentinel and cause (which may be nil) with
// the message "sentinel: context: cause", where cause's message loses its
// leading "ratelimit: " (so that "ratelimit: invalid configuration: limit
// 0: invalid limit: …" names the package once) and an empty context is
// left out. errors.Is finds both sentinel and cause's chain.
func wrap(sentinel error, context string, cause error) error {
	var b strings.Builder
	b.WriteString(sentinel.Error())
	if context != "" {
		b.WriteString(": ")
		b.WriteString(context)
	}
	errs := []error{sentinel}
	if cause != nil {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(cause.Error(), errPrefix))
		errs = append(errs, cause)
	}
	return &wrappedError{msg: b.String(), errs: errs}
}

// within returns err, which wraps sentinel, with context inserted after the
// sentinel's message: "sentinel: context: the rest of err's message". It
// wraps err.
func within(err, sentinel error, context string) error {
	rest := strings.TrimPrefix(err.Error(), sentinel.Error()+": ")
	return &wrappedError{msg: sentinel.Error() + ": " + context + ": " + rest, errs: []error{err}}
}
