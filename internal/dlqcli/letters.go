package dlqcli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	"github.com/retryops/retry-operator/internal/dlqui"
)

// pageSize is how many dead letters one list request asks for.
const pageSize = 500

// listPage reads one page of dead letters.
func (c *clients) listPage(ctx context.Context, opts metav1.ListOptions) (*dlv1.DeadLetterList, error) {
	out := &dlv1.DeadLetterList{}
	err := c.letters.Get().Namespace(c.namespace).Resource(dlv1.Resource).
		VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// getLetter reads one dead letter, its value whole.
func (c *clients) getLetter(ctx context.Context, name string) (*dlv1.DeadLetter, error) {
	out := &dlv1.DeadLetter{}
	err := c.letters.Get().Namespace(c.namespace).Resource(dlv1.Resource).Name(name).Do(ctx).Into(out)
	return out, err
}

// eachLetter lists the dead letters page by page (continue tokens), calling fn for each, until limit
// (0: no limit) were seen; it returns whether more remained.
func (c *clients) eachLetter(ctx context.Context, opts metav1.ListOptions, limit int64, fn func(*dlv1.DeadLetter) error) (bool, error) {
	var seen int64
	for {
		opts.Limit = pageSize
		if limit > 0 {
			opts.Limit = min(pageSize, limit-seen)
		}
		page, err := c.listPage(ctx, opts)
		if err != nil {
			return false, err
		}
		for i := range page.Items {
			if err := fn(&page.Items[i]); err != nil {
				return false, err
			}
			seen++
		}
		if page.Continue == "" {
			return false, nil
		}
		if limit > 0 && seen >= limit {
			return true, nil
		}
		opts.Continue = page.Continue
	}
}

func newListCommand(o *Options) *cobra.Command {
	var sel selectorFlags
	var limit int64
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "list QUEUE",
		Short: "List the dead letters of a queue, with filters",
		Long: `List shows the dead letters of a DeadLetterQueue, read through the deadletters API: its
filters are field selectors the server applies, matching the queue, reason, error type and
pipeline whole (exactly as the replay, resolve, ignore and purge commands given the same flags
select), since/until, and the state label; it pages through the results. Values are not shown: use show for one
dead letter, export for all of them.`,
		Example: `  # Pending dead letters of the last two hours that ran out of retries
  kubectl dlq list orders-dlq --reason max_retries_exceeded --state Pending --since 2h

  # Everything from one pipeline, with error messages
  kubectl dlq list orders-dlq --pipeline orders --limit 0 -o wide`,
		Args:              queueArgs(false),
		ValidArgsFunction: completeQueues(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(o); err != nil {
				return err
			}
			if limit < 0 {
				return usagef("--limit must be 0 (all) or more")
			}
			return runList(cmd, o, &sel, args[0], limit)
		},
	}
	sel.addFlags(cmd, o, false)
	cmd.Flags().Int64Var(&limit, "limit", 100, "show at most this many dead letters (0: all); the server is asked page by page")
	out = addOutputFlags(cmd, o, "", "table", outWide, outJSON, outYAML, outName, outCSV)
	return cmd
}

func runList(cmd *cobra.Command, o *Options, sel *selectorFlags, queue string, limit int64) error {
	ctx := ctxOf(cmd)
	c, err := o.client()
	if err != nil {
		return err
	}
	if _, err := c.getQueue(ctx, queue); err != nil {
		return queueError(err, queue, c.namespace)
	}
	opts, err := sel.listOptions(o, queue)
	if err != nil {
		return err
	}
	list := &dlv1.DeadLetterList{}
	var rows *letterRows
	if o.output == outTable || o.output == outWide || o.output == outCSV {
		rows = newLetterRows(o)
	}
	more, err := c.eachLetter(ctx, opts, limit, func(d *dlv1.DeadLetter) error {
		if rows != nil {
			return rows.add(d)
		}
		list.Items = append(list.Items, *d)
		return nil
	})
	if err != nil {
		return err
	}
	if rows != nil {
		if err := rows.flush(); err != nil {
			return err
		}
		if rows.n == 0 {
			fmt.Fprintf(o.streams.ErrOut, "No dead letters found in %s/%s.\n", c.namespace, queue)
		}
	} else if err := printObject(o, list); err != nil {
		return err
	}
	if more {
		fmt.Fprintf(o.streams.ErrOut, "(showing the first %d; more match: raise --limit, or use export)\n", limit)
	}
	return nil
}

func newShowCommand(o *Options) *cobra.Command {
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "show QUEUE PARTITION/OFFSET",
		Short: "Show one dead letter: its context, state, headers and value",
		Long: `Show prints one dead letter in full: why and when it was dead-lettered, where it came from, its
state in the record of decisions (who decided, when, why), its headers, and its key and value (JSON
pretty-printed, other text as is, binary as base64).`,
		Example: `  kubectl dlq show orders-dlq 0/42
  kubectl dlq show orders-dlq 0/42 -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usagef("want QUEUE PARTITION/OFFSET, for example: kubectl dlq show orders-dlq 0/42")
			}
			if _, err := dlqui.ParseRecord(args[1]); err != nil {
				return usagef("%v", err)
			}
			return nil
		},
		ValidArgsFunction: completeQueues(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(o); err != nil {
				return err
			}
			ctx := ctxOf(cmd)
			c, err := o.client()
			if err != nil {
				return err
			}
			rec, _ := dlqui.ParseRecord(args[1])
			d, err := c.getLetter(ctx, dlv1.Name(args[0], rec.Partition, rec.Offset))
			if apierrors.IsNotFound(err) {
				if _, qerr := c.getQueue(ctx, args[0]); qerr != nil {
					return queueError(qerr, args[0], c.namespace)
				}
				return notFound(fmt.Sprintf("dead letter %s not found in queue %s/%s (kubectl dlq list %s shows what it holds)",
					args[1], c.namespace, args[0], args[0]))
			}
			if err != nil {
				return err
			}
			if o.output != outTable {
				return printObject(o, d)
			}
			return describeLetter(o, d)
		},
	}
	out = addOutputFlags(cmd, o, "a description", outJSON, outYAML, outName)
	return cmd
}

// itoa formats an int64.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }
