package dlqcli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// Stats is what kubectl dlq stats prints, read from the DeadLetterQueue's status (-o json|yaml).
type Stats struct {
	Queue     string `json:"queue"`
	Namespace string `json:"namespace"`
	Topic     string `json:"topic,omitempty"`
	// Messages is the number of dead letters held; Pending those no action decided on.
	Messages int64 `json:"messages"`
	Pending  int64 `json:"pending"`
	// OldestPending, OldestMessage and NewestMessage are record timestamps.
	OldestPending *time.Time `json:"oldestPending,omitempty"`
	OldestMessage *time.Time `json:"oldestMessage,omitempty"`
	NewestMessage *time.Time `json:"newestMessage,omitempty"`
	// GrowthPerMinute is the average arrival rate of the dead letters held: their number over the
	// minutes between the oldest and the newest; absent when fewer than two are held.
	GrowthPerMinute *float64 `json:"growthPerMinute,omitempty"`
	// LastRefresh is when the operator last read these figures from Kafka.
	LastRefresh *time.Time                 `json:"lastRefresh,omitempty"`
	States      []retryv1alpha1.NamedCount `json:"states"`
	Reasons     []retryv1alpha1.NamedCount `json:"reasons"`
	ErrorTypes  []retryv1alpha1.NamedCount `json:"errorTypes"`
	Pipelines   []retryv1alpha1.NamedCount `json:"pipelines"`
}

func statsOf(q *retryv1alpha1.DeadLetterQueue) Stats {
	s := Stats{Queue: q.Name, Namespace: q.Namespace, Topic: q.Status.Topic, States: q.Status.States, Reasons: q.Status.Reasons,
		ErrorTypes: q.Status.ErrorTypes, Pipelines: q.Status.Pipelines}
	if q.Status.Messages != nil {
		s.Messages = *q.Status.Messages
	}
	if q.Status.Pending != nil {
		s.Pending = *q.Status.Pending
	}
	ptrTime := func(t interface{ IsZero() bool }, v time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		v = v.UTC()
		return &v
	}
	if t := q.Status.OldestPendingTime; t != nil {
		s.OldestPending = ptrTime(t, t.Time)
	}
	if t := q.Status.OldestMessageTime; t != nil {
		s.OldestMessage = ptrTime(t, t.Time)
	}
	if t := q.Status.NewestMessageTime; t != nil {
		s.NewestMessage = ptrTime(t, t.Time)
	}
	if t := q.Status.LastRefreshTime; t != nil {
		s.LastRefresh = ptrTime(t, t.Time)
	}
	if s.OldestMessage != nil && s.NewestMessage != nil && s.Messages > 1 {
		if span := s.NewestMessage.Sub(*s.OldestMessage).Minutes(); span > 0 {
			g := float64(s.Messages) / span
			s.GrowthPerMinute = &g
		}
	}
	for _, l := range []*[]retryv1alpha1.NamedCount{&s.States, &s.Reasons, &s.ErrorTypes, &s.Pipelines} {
		if *l == nil {
			*l = []retryv1alpha1.NamedCount{}
		}
	}
	return s
}

func newStatsCommand(o *Options) *cobra.Command {
	var out *outputFlags
	cmd := &cobra.Command{
		Use:   "stats QUEUE",
		Short: "Show counts by state, reason, error type and pipeline, with bar charts",
		Long: `Stats shows a queue's dead letters counted by state, reason, error type and pipeline, the oldest
pending one and the average arrival rate, from the DeadLetterQueue's status (refreshed by the
operator; no dead letter is read).`,
		Example: `  kubectl dlq stats orders-dlq
  kubectl dlq stats orders-dlq -o json`,
		Args:              queueArgs(false),
		ValidArgsFunction: completeQueues(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(o); err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			q, err := c.getQueue(ctxOf(cmd), args[0])
			if err != nil {
				return queueError(err, args[0], c.namespace)
			}
			return printStats(o, statsOf(q))
		},
	}
	out = addOutputFlags(cmd, o, "", "table", outJSON, outYAML, outCSV)
	return cmd
}

func printStats(o *Options, s Stats) error {
	w := o.streams.Out
	sections := []struct {
		title  string
		counts []retryv1alpha1.NamedCount
	}{{"STATE", s.States}, {"REASON", s.Reasons}, {"ERROR TYPE", s.ErrorTypes}, {"PIPELINE", s.Pipelines}}
	switch o.output {
	case outJSON:
		b, err := json.MarshalIndent(s, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", jsonSafe(b))
		return err
	case outYAML:
		b, err := toYAML(s)
		if err != nil {
			return err
		}
		if o.terminal(w) {
			b = []byte(escapeText(string(b)))
		}
		_, err = w.Write(b)
		return err
	case outCSV:
		c := newCSV(o, w, "dimension", "name", "count")
		for _, sec := range sections {
			for _, n := range sec.counts {
				_ = c.Write([]string{strings.ToLower(strings.ReplaceAll(sec.title, " ", "-")), n.Name, strconv.FormatInt(n.Count, 10)})
			}
		}
		c.Flush()
		return c.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Queue:          %s/%s (topic %s)\n", s.Namespace, s.Queue, escapeLine(orNone(s.Topic)))
	fmt.Fprintf(&b, "Dead letters:   %d held, %d pending\n", s.Messages, s.Pending)
	if s.OldestPending != nil {
		fmt.Fprintf(&b, "Oldest pending: %s (%s ago)\n", s.OldestPending.Format(time.RFC3339), age(o.now().Sub(*s.OldestPending)))
	} else {
		fmt.Fprintf(&b, "Oldest pending: none\n")
	}
	if s.GrowthPerMinute != nil {
		fmt.Fprintf(&b, "Growth:         %.2f/min (held dead letters over the %s from the oldest to the newest)\n",
			*s.GrowthPerMinute, age(s.NewestMessage.Sub(*s.OldestMessage)))
	} else {
		fmt.Fprintf(&b, "Growth:         unknown (fewer than two dead letters held)\n")
	}
	if s.LastRefresh != nil {
		fmt.Fprintf(&b, "Refreshed:      %s ago\n", age(o.now().Sub(*s.LastRefresh)))
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	for _, sec := range sections {
		fmt.Fprintln(w)
		t := newTable(w, o.noHeaders, sec.title, "COUNT")
		var top int64
		for _, n := range sec.counts {
			top = max(top, n.Count)
		}
		if len(sec.counts) == 0 {
			t.row("<none>", "0", "")
		}
		for _, n := range sec.counts {
			if bar := chart(n.Count, top, 20); bar != "" {
				t.row(n.Name, strconv.FormatInt(n.Count, 10), bar)
			} else {
				t.row(n.Name, strconv.FormatInt(n.Count, 10))
			}
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	return nil
}

// chart is a bar of n against top, width cells of unicode blocks, without trailing spaces.
func chart(n, top int64, width int) string {
	if top <= 0 {
		return ""
	}
	return strings.TrimRight(blocks(float64(n)/float64(top), width), " ")
}
