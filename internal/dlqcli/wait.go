package dlqcli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// done reports whether an action finished.
func done(a *retryv1alpha1.DeadLetterAction) bool {
	return a.Status.Phase == retryv1alpha1.ActionSucceeded || a.Status.Phase == retryv1alpha1.ActionFailed
}

// waitForAction follows an action through a watch (again after the watch ends) until it finishes,
// drawing a progress bar on stderr when stderr is a terminal, then prints the outcome.
func waitForAction(ctx context.Context, o *Options, c *clients, a *retryv1alpha1.DeadLetterAction, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	bar := newProgressBar(o.streams.ErrOut, o.terminal(o.streams.ErrOut))
	defer bar.finish()
	for !done(a) {
		bar.draw(a)
		w, err := c.watchAction(ctx, a.Name, a.ResourceVersion)
		if apierrors.IsForbidden(err) {
			// no right to watch: read the action again every second instead
			w, err = c.pollAction(ctx, a.Name, o.pollEvery)
		}
		if err != nil {
			return waitError(ctx, a, err)
		}
		a, err = follow(ctx, w, a, bar)
		w.Stop()
		if err != nil {
			return waitError(ctx, a, err)
		}
		if !done(a) {
			// the watch ended (the server closes them now and then): read the action again
			if a, err = c.getAction(ctx, a.Name); err != nil {
				return waitError(ctx, a, err)
			}
		}
	}
	bar.draw(a)
	bar.finish()
	if err := printOutcome(o.streams.Out, a); err != nil {
		return err
	}
	if a.Status.Phase == retryv1alpha1.ActionFailed {
		return &actionFailedError{msg: fmt.Sprintf("%s failed: %s", actionRef(a.Name), conditionMessage(a, retryv1alpha1.ConditionReady))}
	}
	return nil
}

// pollAction reads the action every interval and reports it as Modified events, for a user who may
// get actions but not watch them.
func (c *clients) pollAction(ctx context.Context, name string, interval time.Duration) (watch.Interface, error) {
	w := watch.NewFake()
	go func() {
		defer w.Stop()
		ck := c.clock
		if ck == nil {
			ck = clock.RealClock{}
		}
		t := ck.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
			a, err := c.getAction(ctx, name)
			if err != nil {
				if ctx.Err() == nil {
					w.Error(&apierrors.NewInternalError(err).ErrStatus)
				}
				return
			}
			w.Modify(a)
			if done(a) {
				return
			}
		}
	}()
	return w, nil
}

// follow reads watch events until the action finishes or the watch ends.
func follow(ctx context.Context, w watch.Interface, a *retryv1alpha1.DeadLetterAction, bar *progressBar) (*retryv1alpha1.DeadLetterAction, error) {
	for {
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return a, nil
			}
			switch ev.Type {
			case watch.Deleted:
				return a, fmt.Errorf("%s was deleted while waiting for it", actionRef(a.Name))
			case watch.Error:
				return a, nil // a stale resource version: read again
			case watch.Added, watch.Modified:
				if got, ok := ev.Object.(*retryv1alpha1.DeadLetterAction); ok {
					a = got
					bar.draw(a)
					if done(a) {
						return a, nil
					}
				}
			}
		}
	}
}

func waitError(ctx context.Context, a *retryv1alpha1.DeadLetterAction, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("stopped waiting for %s (it goes on; follow it with kubectl get dla %s -w): %w", actionRef(a.Name), a.Name, ctx.Err())
	}
	return err
}

func conditionMessage(a *retryv1alpha1.DeadLetterAction, t string) string {
	for _, c := range a.Status.Conditions {
		if c.Type == t {
			return c.Reason + ": " + c.Message
		}
	}
	return "no condition says why"
}

// printOutcome prints a finished action's counts.
func printOutcome(w io.Writer, a *retryv1alpha1.DeadLetterAction) error {
	var b strings.Builder
	took := ""
	if a.Status.StartTime != nil && a.Status.CompletionTime != nil {
		took = " in " + a.Status.CompletionTime.Sub(a.Status.StartTime.Time).Round(time.Second).String()
	}
	dry := ""
	if a.Spec.Mode == retryv1alpha1.ActionModeDryRun {
		dry = " (dry run: nothing was changed)"
	}
	fmt.Fprintf(&b, "%s %s%s%s\n", actionRef(a.Name), a.Status.Phase, took, dry)
	doneLabel := map[retryv1alpha1.DeadLetterActionType]string{
		retryv1alpha1.DeadLetterReplay: "replayed", retryv1alpha1.DeadLetterResolve: "resolved", retryv1alpha1.DeadLetterIgnore: "ignored", retryv1alpha1.DeadLetterPurge: "deleted",
	}[a.Spec.Action]
	if a.Spec.Mode == retryv1alpha1.ActionModeDryRun {
		doneLabel = "would be " + doneLabel
	}
	width := max(len(doneLabel), len("matched")) + 1
	count := func(label string, n int64, extra string) {
		fmt.Fprintf(&b, "  %-*s %d%s\n", width, label+":", n, extra)
	}
	count("matched", a.Status.Matched, "")
	count(doneLabel, a.Status.Done, "")
	count("skipped", a.Status.Skipped, skippedReasons(a.Status.SkippedReasons))
	count("failed", a.Status.Failed, "")
	if a.Status.Duplicates > 0 {
		fmt.Fprintf(&b, "  possibly produced twice (resumed): %d\n", a.Status.Duplicates)
	}
	if len(a.Status.MatchedRecords) > 0 {
		fmt.Fprintf(&b, "  matched records: %s\n", joinRefs(a.Status.MatchedRecords))
	}
	if len(a.Status.BlockingRecords) > 0 {
		fmt.Fprintf(&b, "  blocking records (the purge stopped there, per partition): %s\n", joinRefs(a.Status.BlockingRecords))
	}
	if a.Status.Phase == retryv1alpha1.ActionFailed {
		fmt.Fprintf(&b, "  why: %s\n", conditionMessage(a, retryv1alpha1.ConditionReady))
	}
	_, err := io.WriteString(w, escapeText(b.String()))
	return err
}

func skippedReasons(rs []retryv1alpha1.NamedCount) string {
	if len(rs) == 0 {
		return ""
	}
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%s %d", r.Name, r.Count))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func joinRefs(refs []retryv1alpha1.RecordRef) string {
	s := make([]string, 0, len(refs))
	for _, r := range refs {
		s = append(s, string(r))
	}
	return strings.Join(s, " ")
}

// progressBar draws "[█████▌    ]  55%  550/1000  Running" on one terminal line; it draws nothing
// when the stream is not a terminal.
type progressBar struct {
	w     io.Writer
	on    bool
	drawn bool
	last  string
}

func newProgressBar(w io.Writer, terminal bool) *progressBar { return &progressBar{w: w, on: terminal} }

func (p *progressBar) draw(a *retryv1alpha1.DeadLetterAction) {
	if !p.on {
		return
	}
	phase := string(a.Status.Phase)
	if phase == "" {
		phase = string(retryv1alpha1.ActionPending)
	}
	line := renderBar(a.Status.Done+a.Status.Skipped+a.Status.Failed, a.Status.Matched, 30) + "  " + escapeLine(phase)
	if line == p.last {
		return
	}
	p.last, p.drawn = line, true
	fmt.Fprintf(p.w, "\r\033[K%s", line)
}

func (p *progressBar) finish() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// renderBar is "[██████▍        ]  42%  420/1000" for n of total, width cells wide.
func renderBar(n, total int64, width int) string {
	frac := 0.0
	if total > 0 {
		frac = min(float64(n)/float64(total), 1)
	}
	return fmt.Sprintf("[%s] %3d%%  %d/%d", blocks(frac, width), int(frac*100), n, total)
}

// eighths are the partial block characters, one eighth to seven eighths of a cell.
var eighths = []rune{' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'}

// blocks fills frac of width cells with unicode blocks, to an eighth of a cell, padded with spaces.
func blocks(frac float64, width int) string {
	cells := int(frac*float64(width)*8 + 0.5)
	full, part := cells/8, cells%8
	s := strings.Repeat("█", min(full, width))
	if full < width {
		if part > 0 {
			s += string(eighths[part])
			full++
		}
		s += strings.Repeat(" ", width-full)
	}
	return s
}
