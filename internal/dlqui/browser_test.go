package dlqui

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// chromiumPath installs Debian's chromium when it is missing (hack/setup-chromium.sh) and returns
// its path; the test fails, never skips, when that is not possible.
func chromiumPath(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs("../../hack/setup-chromium.sh")
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd := exec.Command(script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the browser test needs Chromium and %s could not provide it: %v\n%s\nInstall Debian's chromium package (apt-get install chromium) or put chromium on PATH.", script, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// screenshotDir is where the test writes its screenshots: $DLQUI_SCREENSHOTS (make
// console-screenshots sets it to docs/) or a temporary directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("DLQUI_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// pageErrors collects what the page reports as errors: uncaught exceptions, console.error and
// console.warn calls, and browser log entries of level error (CSP violations, failed loads).
type pageErrors struct {
	mu   sync.Mutex
	list []string
}

func (p *pageErrors) listen(ev any) {
	var msg string
	switch e := ev.(type) {
	case *runtime.EventExceptionThrown:
		msg = "exception: " + e.ExceptionDetails.Text
		if e.ExceptionDetails.Exception != nil {
			msg += " " + e.ExceptionDetails.Exception.Description
		}
	case *runtime.EventConsoleAPICalled:
		if e.Type != runtime.ConsoleAPICalledTypeError && e.Type != runtime.ConsoleAPICalledTypeWarning {
			return
		}
		var args []string
		for _, a := range e.Args {
			args = append(args, string(a.Value)+a.Description)
		}
		msg = fmt.Sprintf("console.%s: %s", e.Type, strings.Join(args, " "))
	case *cdplog.EventEntryAdded:
		if e.Entry.Level != cdplog.EntryLevelError && e.Entry.Level != cdplog.EntryLevelWarning {
			return
		}
		msg = fmt.Sprintf("log %s: %s %s", e.Entry.Level, e.Entry.Text, e.Entry.URL)
	default:
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = append(p.list, msg)
}

func (p *pageErrors) get() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.list...)
}

// browser is a headless Chromium tab with the helpers the browser tests share.
type browser struct {
	t     *testing.T
	ctx   context.Context
	errs  *pageErrors
	shots string
}

func newBrowser(ctx context.Context, t *testing.T, chromium, shots string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.WindowSize(1366, 860), chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("lang", "en-US"))
	allocCtx, allocCancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(allocCancel)
	errs := &pageErrors{}
	bctx, bcancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf), chromedp.WithListener(errs.listen))
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	return &browser{t: t, ctx: bctx, errs: errs, shots: shots}
}

// do runs a step's actions, each step bounded on its own so that a page that never shows what the
// step waits for fails that step.
func (b *browser) do(step string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	sctx, scancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer scancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		pctx, pcancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer pcancel()
		loc, _ := chromedp.Run(pctx, chromedp.Location())
		text, _ := chromedp.Run(pctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		b.t.Fatalf("%s: %v (page errors: %v)\nthe page at %s:\n%s", step, err, b.errs.get(), loc, text)
	}
}

// text is the visible text of the first element sel selects.
func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(css(sel)))
	if err != nil {
		b.t.Fatalf("reading %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// shot writes a screenshot of the whole page into the screenshot directory.
func (b *browser) shot(name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		buf, err := chromedp.FullScreenshot(100)(ctx, tg)
		if err != nil {
			return err
		}
		p := filepath.Join(b.shots, name)
		b.t.Logf("screenshot %s", p)
		return os.WriteFile(p, buf, 0o644)
	})
}

func css(s string) chromedp.CSS { return chromedp.CSS(s) }

// follow clicks what navigates and waits for the next page's load event.
func follow(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.WaitEvent(cdppage.LoadEventFired, nil, chromedp.Click(css(sel)))(ctx, tg)
		return err
	})
}

// waitFor waits until the JavaScript condition holds (the polling timeout, 30s).
func waitFor(cond string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Poll[bool](cond)(ctx, tg)
		return err
	})
}

// seedSamples gives the overview's sparklines the last twelve minutes of status refreshes.
func seedSamples(srv *Server, fake *fakeBackend) {
	for name, q := range fake.queues {
		pending := *q.Status.Pending
		for i := range 24 {
			s := q.DeepCopy()
			p := max(0, pending-int64(24-i)*pending/40+int64(i%3))
			if name == "payments-dlq" {
				p = pending + int64(5-i%6)
			}
			s.Status.Pending = ptr.To(p)
			s.Status.LastRefreshTime = ptr.To(metav1.NewTime(testNow.Add(-time.Duration(24-i) * 30 * time.Second)))
			srv.samples.record(s)
		}
	}
}

// TestConsoleInBrowser drives the console in real headless Chromium: the overview, a filter by
// reason, a dead letter, its replay (dry run, confirmation, progress to 100%), its state turned
// Replayed, then a bulk replay followed live; no error in the page; a screenshot of each page.
func TestConsoleInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	shots := screenshotDir(t)

	fake := newFakeBackend(testNow)
	fake.addQueue("orders-dlq", 60)
	fake.addQueue("payments-dlq", 7)
	fake.step = 2
	// the confirmation page first finds its dry run running, then follows it (console.js) until done
	fake.dryRunReads = 1
	srv, err := New(Options{Backend: fake, Clock: clocktesting.NewFakePassiveClock(testNow), PollInterval: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	seedSamples(srv, fake)
	l, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()
	defer func() {
		cancel()
		<-served
	}()

	b := newBrowser(ctx, t, chromium, shots)
	do, text, shot := b.do, b.text, b.shot

	do("open the URL kubectl dlq ui prints", chromedp.Navigate(srv.URL(l.Addr().String())),
		chromedp.WaitVisible(css(`section.card polyline`)), shot("console-overview.png"))
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	if err != nil || strings.Contains(loc, "token") {
		t.Errorf("the token stayed in the address bar: %s (%v)", loc, err)
	}

	do("filter by reason", follow(`a[href$="/queues/orders-dlq"]`),
		chromedp.WaitVisible(css(`#f-reason`)),
		chromedp.SetValue(css(`#f-reason`), "deadline_exceeded"),
		follow(`#apply-filter`),
		waitFor(`document.getElementById('letters-caption').textContent.includes('reason deadline_exceeded')`),
		shot("console-queue.png"))
	reasons, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('table.letters tbody tr td:nth-child(3)')].map(td => td.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(reasons) != 20 {
		t.Errorf("%d dead letters listed for deadline_exceeded, want 20", len(reasons))
	}
	for _, r := range reasons {
		if r != "deadline_exceeded" {
			t.Errorf("a %q dead letter is listed under the reason filter", r)
		}
	}

	do("open a dead letter", follow(`a.letter-link`), chromedp.WaitVisible(css(`#letter-state`)),
		chromedp.WaitVisible(css(`#value`)), shot("console-letter.png"))
	if s := text(`h1`); s != "Dead letter 0/1" {
		t.Errorf("opened %q, want Dead letter 0/1 (the first deadline_exceeded)", s)
	}
	if s := text(`#letter-state`); s != "Pending" {
		t.Errorf("state %q before the replay, want Pending", s)
	}
	if v := text(`#value`); !strings.Contains(v, "\n  \"order\": \"o-1002\",") {
		t.Errorf("the value is not pretty-printed JSON: %q", v)
	}

	do("replay it: the dry run's confirmation", follow(`#replay`), chromedp.WaitVisible(css(`#confirm`)),
		shot("console-confirm.png"))
	if s := text(`#matched`); !strings.HasPrefix(s, "1 dead letter would be replayed") {
		t.Errorf("the confirmation says %q, want the dry run's count, 1", s)
	}
	do("confirm and watch the progress reach 100%", follow(`#confirm`), chromedp.WaitVisible(css(`#progress`)),
		waitFor(`document.getElementById('progress').getAttribute('aria-valuenow') === '100' && !document.getElementById('finished').hidden`))
	if s := text(`#phase`); s != "Succeeded" {
		t.Errorf("phase %q at 100%%", s)
	}
	do("back to the dead letter", follow(`#back-to-letter`), chromedp.WaitVisible(css(`#letter-state`)))
	if s := text(`#letter-state`); s != "Replayed" {
		t.Errorf("state %q after the replay, want Replayed", s)
	}

	base := "http://" + l.Addr().String()
	do("a bulk replay, followed live", chromedp.Navigate(base+srv.path("/queues/orders-dlq?reason=max_retries_exceeded&state=Pending")),
		chromedp.WaitVisible(css(`#bulk-preview`)), chromedp.SetValue(css(`#bulk-action`), "replay"),
		follow(`#bulk-preview`), chromedp.WaitVisible(css(`#confirm`)),
		follow(`#confirm`),
		waitFor(`(() => { const p = document.getElementById('progress'); return !!p && p.value >= 40 && p.value < 100; })()`),
		shot("console-progress.png"),
		waitFor(`document.getElementById('progress').value === 100 && !document.getElementById('finished').hidden`),
		follow(`a[href$="/actions"]`), chromedp.WaitVisible(css(`table.actions`)), shot("console-actions.png"))
	if s := text(`#main`); !strings.Contains(s, "Succeeded") {
		t.Errorf("the actions page: %q", s)
	}
	fake.mu.Lock()
	var replayed int
	for _, l := range fake.letters["orders-dlq"] {
		if l.State.State == "Replayed" {
			replayed++
		}
	}
	fake.mu.Unlock()
	if replayed != 21 {
		t.Errorf("%d dead letters replayed, want 21 (one, then the 20 max_retries_exceeded)", replayed)
	}
	if e := b.errs.get(); len(e) > 0 {
		t.Errorf("the page reported errors:\n%s", strings.Join(e, "\n"))
	}
}
