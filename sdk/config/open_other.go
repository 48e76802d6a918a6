//go:build !unix

package config

// openFlags: only unix has FIFOs whose open(2) blocks.
const openFlags = 0
