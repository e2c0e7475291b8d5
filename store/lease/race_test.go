//go:build race

package lease_test

// raceEnabled is true under the race detector, whose sync.Pool drops a
// quarter of what is put back: pooled scratch is then allocated again.
const raceEnabled = true
