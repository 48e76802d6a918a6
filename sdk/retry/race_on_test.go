//go:build race

package retry_test

// raceEnabled reports that the race detector is on: it makes sync.Pool (used by regexp) drop items at
// random, so allocation counts are meaningless.
const raceEnabled = true
