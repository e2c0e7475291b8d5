//go:build race

package linearize

// raceEnabled is true under the race detector, which slows every call
// several times over: the tests then check fewer histories.
const raceEnabled = true
