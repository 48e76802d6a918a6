//go:build !race

package retry_test

// raceEnabled reports that the race detector is on.
const raceEnabled = false
