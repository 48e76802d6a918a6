package dlqui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
)

// startConsole serves a console on a fake backend on a free loopback port until the test ends.
func startConsole(ctx context.Context, t *testing.T) (*Server, string) {
	t.Helper()
	fake := newFakeBackend(testNow)
	fake.addQueue("orders-dlq", 3)
	srv, err := New(Options{Backend: fake, Clock: clocktesting.NewFakePassiveClock(testNow)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		<-served
	})
	return srv, l.Addr().String()
}

// TestTwoConsolesSideBySide runs two consoles (as kubectl dlq ui -n a and -n b would) and another
// local server in one real browser: signing in to the second console leaves the first signed in
// (cookies ignore ports, so one fixed cookie on 127.0.0.1 was replaced), and the other server on
// 127.0.0.1 never receives a console's session.
func TestTwoConsolesSideBySide(t *testing.T) {
	g := NewWithT(t)
	chromium := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first, firstAddr := startConsole(ctx, t)
	second, secondAddr := startConsole(ctx, t)

	var mu sync.Mutex
	var seen []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" Cookie: "+r.Header.Get("Cookie"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><title>other</title><p id="other">another local server</p>`))
	}))
	t.Cleanup(other.Close)
	g.Expect(other.Listener.Addr().String()).To(HavePrefix("127.0.0.1:"))

	b := newBrowser(ctx, t, chromium, t.TempDir())
	b.do("sign in to the first console", chromedp.Navigate(first.URL(firstAddr)), chromedp.WaitVisible(css(`section.card`)))
	firstPage, err := chromedp.Run(b.ctx, chromedp.Location())
	g.Expect(err).NotTo(HaveOccurred())
	b.do("sign in to the second console", chromedp.Navigate(second.URL(secondAddr)), chromedp.WaitVisible(css(`section.card`)))
	secondPage, err := chromedp.Run(b.ctx, chromedp.Location())
	g.Expect(err).NotTo(HaveOccurred())

	for _, page := range []string{firstPage, secondPage, firstPage} {
		b.do("back to "+page, chromedp.Navigate(page), chromedp.WaitReady(css(`body`)))
		g.Expect(b.text(`body`)).NotTo(ContainSubstring("not signed in"), "%s, with the other console signed in", page)
		g.Expect(b.text(`h1`)).To(Equal("Dead-letter queues"), page)
	}
	for _, p := range []string{"/", "/queues/orders-dlq", "/static/console.js"} {
		b.do("visit another local server at "+p, chromedp.Navigate(other.URL+p), chromedp.WaitVisible(css(`#other`)))
	}
	mu.Lock()
	defer mu.Unlock()
	g.Expect(len(seen)).To(BeNumerically(">=", 3), "the three visits, and the browser's own favicon requests")
	for _, s := range seen {
		g.Expect(s).NotTo(ContainSubstring(cookieName), "another server on 127.0.0.1 received a console's session")
		g.Expect(s).NotTo(Or(ContainSubstring(first.Token()), ContainSubstring(second.Token())))
	}
	g.Expect(strings.Join(b.errs.get(), "\n")).To(BeEmpty())
}

// TestBrowserSignsInFromTheOpenersPage: OpenBrowser gives the desktop's opener (here a stand-in
// xdg-open that records its arguments) the path of a private sign-in page; real Chromium opening
// that file lands signed in on the console (the one-time code posted from a file, then the
// console's own page moving on, so the strict cookie goes along), the page is removed once used,
// and the opener's arguments never held the session token.
func TestBrowserSignsInFromTheOpenersPage(t *testing.T) {
	g := NewWithT(t)
	chromium := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, addr := startConsole(ctx, t)
	bin, record := t.TempDir(), filepath.Join(t.TempDir(), "argv")
	g.Expect(os.WriteFile(filepath.Join(bin, "xdg-open"), []byte("#!/bin/sh\nprintf '%s\\n' \"$@\" > "+record+".tmp && mv "+record+".tmp "+record+"\n"), 0o755)).To(Succeed())
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	g.Expect(srv.OpenBrowser(addr)).To(Succeed())
	var argv []byte
	g.Eventually(func() error { var err error; argv, err = os.ReadFile(record); return err }, 30*time.Second, 20*time.Millisecond).Should(Succeed())
	g.Expect(string(argv)).NotTo(ContainSubstring(srv.Token()))
	page := strings.TrimSpace(string(argv))
	g.Expect(page).To(HaveSuffix(".html"))

	b := newBrowser(ctx, t, chromium, t.TempDir())
	b.do("open the page the opener got", chromedp.Navigate("file://"+page), chromedp.WaitVisible(css(`section.card`)))
	g.Expect(b.text(`h1`)).To(Equal("Dead-letter queues"))
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(loc).To(Equal("http://" + addr + srv.Base()))
	b.do("follow a link", follow(`a[href$="/queues/orders-dlq"]`), chromedp.WaitVisible(css(`#f-reason`)))
	_, err = os.Stat(page)
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "the sign-in page is removed once used: %v", err)
	g.Expect(strings.Join(b.errs.get(), "\n")).To(BeEmpty())
}
