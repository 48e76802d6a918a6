//go:build race

package dispatcher_test

// raceEnabled: the race detector slows the HTTP and Kafka stacks several-fold, so timing checks
// widen their tolerance; the normal run checks the real contract.
const raceEnabled = true
