package dlqcli

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// actionColumns are the CSV columns of kubectl dlq actions -o csv.
var actionColumns = []string{"namespace", "name", "action", "queue", "mode", "phase", "matched", "done", "skipped", "failed", "requestedBy", "note", "created", "completed"}

func newActionsCommand(o *Options) *cobra.Command {
	var allNamespaces bool
	var limit int
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "actions [QUEUE]",
		Short: "List recent DeadLetterActions, newest first",
		Long: `Actions lists the DeadLetterActions of the namespace (or of one queue), newest first: what was asked,
by whom, and how far it got.`,
		Example: `  # The last actions on any queue of the namespace
  kubectl dlq actions

  # Every action on one queue, with counts and notes
  kubectl dlq actions orders-dlq --limit 0 -o wide`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeQueues(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(o); err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			list, err := c.listActions(ctxOf(cmd), allNamespaces)
			if err != nil {
				return err
			}
			items := list.Items[:0]
			for _, a := range list.Items {
				if len(args) == 0 || a.Spec.Queue == args[0] {
					items = append(items, a)
				}
			}
			sort.SliceStable(items, func(i, j int) bool {
				ti, tj := items[i].CreationTimestamp, items[j].CreationTimestamp
				if !ti.Equal(&tj) {
					return tj.Before(&ti)
				}
				return items[i].Name < items[j].Name
			})
			if limit > 0 && len(items) > limit {
				items = items[:limit]
			}
			list.Items = items
			return printActions(o, list, allNamespaces)
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "list the actions of every namespace")
	cmd.Flags().IntVar(&limit, "limit", 20, "show at most this many (0: all)")
	out = addOutputFlags(cmd, o, "", "table", outWide, outJSON, outYAML, outName, outCSV)
	return cmd
}

func printActions(o *Options, list *retryv1alpha1.DeadLetterActionList, allNamespaces bool) error {
	switch o.output {
	case outJSON, outYAML, outName:
		return printObject(o, list)
	case outCSV:
		w := newCSV(o, o.streams.Out, actionColumns...)
		for _, a := range list.Items {
			completed := ""
			if a.Status.CompletionTime != nil {
				completed = a.Status.CompletionTime.UTC().Format(time.RFC3339)
			}
			_ = w.Write([]string{a.Namespace, a.Name, string(a.Spec.Action), a.Spec.Queue, string(a.Spec.Mode), string(a.Status.Phase),
				strconv.FormatInt(a.Status.Matched, 10), strconv.FormatInt(a.Status.Done, 10), strconv.FormatInt(a.Status.Skipped, 10),
				strconv.FormatInt(a.Status.Failed, 10), a.Spec.RequestedBy, a.Spec.Note, a.CreationTimestamp.UTC().Format(time.RFC3339), completed})
		}
		w.Flush()
		return w.Error()
	}
	if len(list.Items) == 0 {
		_, err := fmt.Fprintln(o.streams.ErrOut, "No actions found.")
		return err
	}
	headers := []string{"NAME", "ACTION", "QUEUE", "MODE", "PHASE", "PROGRESS", "REQUESTED BY", "AGE"}
	if o.output == outWide {
		headers = append(headers, "MATCHED", "DONE", "SKIPPED", "FAILED", "NOTE")
	}
	if allNamespaces {
		headers = append([]string{"NAMESPACE"}, headers...)
	}
	t := newTable(o.streams.Out, o.noHeaders, headers...)
	for _, a := range list.Items {
		phase := string(a.Status.Phase)
		if phase == "" {
			phase = string(retryv1alpha1.ActionPending)
		}
		row := []string{a.Name, string(a.Spec.Action), a.Spec.Queue, string(a.Spec.Mode), phase, orNone(a.Status.Progress), a.Spec.RequestedBy,
			age(o.now().Sub(a.CreationTimestamp.Time))}
		if o.output == outWide {
			row = append(row, strconv.FormatInt(a.Status.Matched, 10), strconv.FormatInt(a.Status.Done, 10),
				strconv.FormatInt(a.Status.Skipped, 10), strconv.FormatInt(a.Status.Failed, 10), orNone(a.Spec.Note))
		}
		if allNamespaces {
			row = append([]string{a.Namespace}, row...)
		}
		t.row(row...)
	}
	return t.flush()
}
