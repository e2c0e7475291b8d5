//go:build race

package chaos

// raceEnabled is true under the race detector, which slows every call
// several times over: deadline-based fault scenarios then measure the
// detector, not the limiter.
const raceEnabled = true
