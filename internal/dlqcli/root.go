package dlqcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"
)

// Exit codes of kubectl dlq (documented in docs/kubectl-dlq.md and in the root command's help).
const (
	// ExitOK: the command did what was asked.
	ExitOK = 0
	// ExitError: the API server refused the request (forbidden, unauthorized, invalid) or could not
	// be reached, or anything else went wrong; the message on stderr says which.
	ExitError = 1
	// ExitNotFound: the queue, the dead letter or the action named does not exist.
	ExitNotFound = 2
	// ExitUsage: the command line is wrong (an unknown flag, a missing argument, a bad value).
	ExitUsage = 3
	// ExitActionFailed: with --wait, the action finished in phase Failed.
	ExitActionFailed = 4
)

// Options are what every command shares: the kubeconfig flags, the streams, the output format.
type Options struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	// output is -o; noHeaders is --no-headers.
	output    string
	noHeaders bool
	// print is the running command's -o (its --show-managed-fields).
	print *genericclioptions.PrintFlags
	// clock reads the time for ages and relative times (--since 2h).
	clock clock.PassiveClock
	// terminal reports whether w is a terminal, for progress bars.
	terminal func(w io.Writer) bool
	// pollEvery is how often --wait reads an action it may not watch.
	pollEvery time.Duration

	c *clients
}

// client connects on first use, so that --help and completion of flags need no cluster.
func (o *Options) client() (*clients, error) {
	if o.c != nil {
		return o.c, nil
	}
	c, err := newClients(o.flags, newWarningPrinter(o.streams.ErrOut))
	if err != nil {
		return nil, err
	}
	o.c = c
	return c, nil
}

// usageError is an error in the command line: exit code ExitUsage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// actionFailedError is a waited-for action that ended Failed: exit code ExitActionFailed.
type actionFailedError struct{ msg string }

func (e *actionFailedError) Error() string { return e.msg }

func newOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{
		flags:     genericclioptions.NewConfigFlags(true),
		streams:   streams,
		clock:     clock.RealClock{},
		terminal:  isTerminal,
		pollEvery: time.Second,
	}
}

func newCommand(o *Options) *cobra.Command {
	streams := o.streams
	root := &cobra.Command{
		Use:   "kubectl-dlq",
		Short: "Look at dead letters and decide their fate",
		Long: `kubectl dlq reads the dead letters of a DeadLetterQueue through the deadletters API
(deadletters.retryops.dev) and changes them by creating DeadLetterActions (retry.retryops.dev),
under your own kubeconfig identity and RBAC.

Exit codes: 0 success; 1 an error (the API server refused the request, for example forbidden, or
could not be reached); 2 the queue, dead letter or action was not found; 3 the command line is
wrong; 4 an action waited for with --wait failed.`,
		Example: `  # Dead letters of a queue, newest last, and one of them in full
  kubectl dlq list orders-dlq --reason max_retries_exceeded --since 2h
  kubectl dlq show orders-dlq 0/42

  # Replay the timeouts of the last hour and follow the progress
  kubectl dlq replay orders-dlq --error-type timeout --since 1h --wait

  # Counts by reason, error type, pipeline and state
  kubectl dlq stats orders-dlq`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// kubectl runs the plugin as "kubectl dlq": usage lines say so.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl dlq"},
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.flags.AddFlags(root.PersistentFlags())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })
	root.AddCommand(
		newListCommand(o),
		newShowCommand(o),
		newExportCommand(o),
		newActCommand(o, actReplay),
		newActCommand(o, actResolve),
		newActCommand(o, actIgnore),
		newActCommand(o, actPurge),
		newStatsCommand(o),
		newActionsCommand(o),
		newUICommand(o),
	)
	return root
}

// Main runs the plugin with args and returns its exit code; errors go to stderr.
func Main(args []string, streams genericiooptions.IOStreams) int {
	ctx, cancel := signalContext()
	defer cancel()
	return execute(ctx, newOptions(streams), args)
}

// execute runs the command tree on args and returns the exit code, the error on stderr.
func execute(ctx context.Context, o *Options, args []string) int {
	cmd := newCommand(o)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(o.streams.ErrOut, "error: "+escapeText(message(err)))
	return exitCode(err)
}

// exitCode maps an error to the documented exit codes.
func exitCode(err error) int {
	var usage *usageError
	var failed *actionFailedError
	switch {
	case errors.As(err, &usage), isCobraUsage(err):
		return ExitUsage
	case errors.As(err, &failed):
		return ExitActionFailed
	case apierrors.IsNotFound(err):
		return ExitNotFound
	default:
		return ExitError
	}
}

// isCobraUsage recognises cobra's own argument errors (unknown command, wrong argument count).
func isCobraUsage(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.HasPrefix(s, "accepts ") ||
		strings.HasPrefix(s, "requires ") || strings.Contains(s, "arg(s), received") ||
		strings.HasPrefix(s, "required flag(s)") || strings.HasPrefix(s, "if any flags in the group")
}

// message words an API error for a person: who was refused what, and what to do.
func message(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		switch {
		case apierrors.IsForbidden(err):
			return status.Status().Message + " (ask for the RBAC permission, or use --context/--namespace)"
		case apierrors.IsUnauthorized(err):
			return "the API server does not know you: " + status.Status().Message + " (check your kubeconfig credentials)"
		}
	}
	return err.Error()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && termIsTerminal(int(f.Fd()))
}

// ctxOf is the command's context, never nil.
func ctxOf(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// now is the plugin's clock reading.
func (o *Options) now() time.Time { return o.clock.Now() }
