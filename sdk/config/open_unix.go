//go:build unix

package config

import "syscall"

// openFlags keep open(2) from blocking on a FIFO no one writes; readFile then refuses it.
const openFlags = syscall.O_NONBLOCK
