package dlqcli

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

// signalContext is cancelled by Ctrl-C or SIGTERM: a --wait stops waiting (the action goes on).
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func termIsTerminal(fd int) bool { return term.IsTerminal(fd) }
