//go:build race

package main

// raceEnabled is true under -race: the simulation runs on one goroutine,
// so the race detector finds nothing in it, and makes it 20 times slower.
const raceEnabled = true
