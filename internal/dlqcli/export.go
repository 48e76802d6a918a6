package dlqcli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
)

// largeQueue is how many dead letters make export draw a progress bar (on a terminal).
const largeQueue = 1000

func newExportCommand(o *Options) *cobra.Command {
	var sel selectorFlags
	var file string
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "export QUEUE -o csv|json [--file F]",
		Short: "Export the dead letters of a queue as CSV or JSON",
		Long: `Export writes every dead letter of a queue that the filters select, page by page, as CSV (one
row per dead letter, the columns below) or JSON (a DeadLetterList, as kubectl get -o json writes it), to
stdout or --file. On a terminal, a queue of more than 1000 dead letters gets a progress bar on stderr.

CSV columns: queue, partition, offset, timestamp (dead-lettered, RFC 3339 UTC), state, reason,
errorType, errorMessage, httpStatus, attempts, pipeline, consumerGroup, originalTopic,
originalPartition, originalOffset, firstFailureTime, lastFailureTime, replayCount, key, keyEncoding
(text or base64), value, valueEncoding, valueTruncated (a value over 64 KiB is cut by the list; show
gives it whole), headers (a JSON array of name, value, encoding), stateNote, stateRequestedBy,
stateTime.

The values of a dead letter were written by producers and sinks: a CSV cell that a spreadsheet would
run as a formula (one starting with =, +, -, @, a tab or a carriage return, also after blanks or
quotes, also their full-width forms) is written with a single quote first, in double quotes, so that
it shows as text, and so is each part of a cell after a ';', a tab or a line break (where a spreadsheet
splitting at ';' or tabs starts a field: x;=1+1 is written x;'=1+1); a plain number such as -5 stays a number. For the data exactly as it is, use -o json.
JSON escapes the characters a terminal acts on (the same data); CSV written to a terminal shows them
escaped.`,
		Example: `  # Everything, for a spreadsheet
  kubectl dlq export orders-dlq -o csv --file orders-dlq.csv

  # Pending timeouts as JSON, to jq
  kubectl dlq export orders-dlq -o json --state Pending --error-type timeout | jq '.items[].value.data'`,
		Args:              queueArgs(false),
		ValidArgsFunction: completeQueues(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.output == "" {
				return usagef("export needs -o csv or -o json")
			}
			if err := out.check(o); err != nil {
				return err
			}
			if file != "" {
				f, err := os.Create(file)
				if err != nil {
					return err
				}
				err = runExport(cmd, o, &sel, args[0], f)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				return err
			}
			return runExport(cmd, o, &sel, args[0], o.streams.Out)
		},
	}
	sel.addFlags(cmd, o, false)
	out = addOutputFlags(cmd, o, "", outCSV, outJSON)
	cmd.Flags().StringVar(&file, "file", "", "write to this file instead of stdout")
	return cmd
}

func runExport(cmd *cobra.Command, o *Options, sel *selectorFlags, queue string, out io.Writer) error {
	ctx := ctxOf(cmd)
	c, err := o.client()
	if err != nil {
		return err
	}
	q, err := c.getQueue(ctx, queue)
	if err != nil {
		return queueError(err, queue, c.namespace)
	}
	opts, err := sel.listOptions(o, queue)
	if err != nil {
		return err
	}
	var total int64
	if q.Status.Messages != nil {
		total = *q.Status.Messages
	}
	bar := newCountBar(o.streams.ErrOut, o.terminal(o.streams.ErrOut) && total > largeQueue, total)
	defer bar.finish()
	var n int64
	var write func(d *dlv1.DeadLetter) error
	var end func() error
	switch o.output {
	case outCSV:
		w := newCSV(o, out, LetterColumns...)
		write = func(d *dlv1.DeadLetter) error { return w.Write(letterCSV(d)) }
		end = func() error { w.Flush(); return w.Error() }
	default:
		// a DeadLetterList written item by item, so that a large queue is never held in memory
		head := fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"items":[`, dlv1.SchemeGroupVersion.String(), dlv1.ListKind)
		if _, err := io.WriteString(out, head); err != nil {
			return err
		}
		write = func(d *dlv1.DeadLetter) error {
			d.APIVersion, d.Kind = dlv1.SchemeGroupVersion.String(), dlv1.Kind
			b, err := json.Marshal(d)
			if err != nil {
				return err
			}
			sep := ",\n"
			if n == 0 {
				sep = "\n"
			}
			_, err = io.WriteString(out, sep+string(jsonSafe(b)))
			return err
		}
		end = func() error { _, err := io.WriteString(out, "\n]}\n"); return err }
	}
	if _, err := c.eachLetter(ctx, opts, 0, func(d *dlv1.DeadLetter) error {
		if err := write(d); err != nil {
			return err
		}
		n++
		bar.set(n)
		return nil
	}); err != nil {
		return err
	}
	if err := end(); err != nil {
		return err
	}
	bar.finish()
	if f, ok := out.(*os.File); ok && f != os.Stdout {
		fmt.Fprintf(o.streams.ErrOut, "%d dead letters written to %s\n", n, f.Name())
	}
	return nil
}

// countBar is the export's progress bar: n of an estimated total.
type countBar struct {
	w     io.Writer
	on    bool
	total int64
	last  int
	drawn bool
}

func newCountBar(w io.Writer, on bool, total int64) *countBar {
	return &countBar{w: w, on: on, total: total, last: -1}
}

func (b *countBar) set(n int64) {
	if !b.on {
		return
	}
	pct := int(min(n, b.total) * 100 / max(b.total, 1))
	if pct == b.last && n%pageSize != 0 {
		return
	}
	b.last, b.drawn = pct, true
	fmt.Fprintf(b.w, "\r\033[K%s  exporting", renderBar(min(n, b.total), b.total, 30))
}

func (b *countBar) finish() {
	if b.drawn {
		fmt.Fprintln(b.w)
		b.drawn = false
	}
}
