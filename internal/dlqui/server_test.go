package dlqui

import (
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

var testNow = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// console is a console on a fake backend behind httptest, and a browser-like client signed in.
type console struct {
	t       *testing.T
	fake    *fakeBackend
	srv     *Server
	ts      *httptest.Server
	client  *http.Client
	lastURL string
}

func newConsole(t *testing.T) *console {
	t.Helper()
	fake := newFakeBackend(testNow)
	fake.addQueue("orders-dlq", 60)
	fake.addQueue("payments-dlq", 7)
	srv, err := New(Options{Backend: fake, Clock: clocktesting.NewFakePassiveClock(testNow), PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	srv.SetAddress(ts.Listener.Addr().String())
	jar, _ := cookiejar.New(nil)
	c := &console{t: t, fake: fake, srv: srv, ts: ts, client: &http.Client{Jar: jar}}
	if code, _ := c.get("/?token=" + url.QueryEscape(srv.Token())); code != http.StatusOK {
		t.Fatalf("signing in with the URL's token: %d", code)
	}
	return c
}

func (c *console) do(req *http.Request) (int, string) {
	c.t.Helper()
	resp, err := c.client.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	// lastURL is where the request landed, within the console (its base path as /)
	c.lastURL = "/" + strings.TrimPrefix(resp.Request.URL.RequestURI(), c.srv.Base())
	return resp.StatusCode, string(b)
}

// url is the console's path, under its base unless it already is (a link read from a page).
func (c *console) url(path string) string {
	if strings.HasPrefix(path, c.srv.Base()) {
		return c.ts.URL + path
	}
	return c.ts.URL + c.srv.path(path)
}

func (c *console) get(path string) (int, string) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.url(path), nil)
	return c.do(req)
}

func (c *console) post(path string, form url.Values) (int, string) {
	c.t.Helper()
	if form.Get("csrf") == "" {
		form.Set("csrf", c.srv.Token())
	}
	req, _ := http.NewRequest(http.MethodPost, c.url(path), strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", c.ts.URL)
	return c.do(req)
}

func mustContain(t *testing.T, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("the page lacks %q", w)
		}
	}
}

func TestGuards(t *testing.T) {
	c := newConsole(t)
	plain := func(method, path, host, cookie string, form url.Values) int {
		req := httptest.NewRequest(method, c.srv.path(path), strings.NewReader(form.Encode()))
		req.Host = host
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if cookie != "" {
			req.AddCookie(&http.Cookie{Name: cookieName, Value: cookie})
		}
		w := httptest.NewRecorder()
		c.srv.ServeHTTP(w, req)
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("%s %s: no strict CSP: %q", method, path, csp)
		}
		return w.Code
	}
	host := c.ts.Listener.Addr().String()
	tok := c.srv.Token()
	for _, tc := range []struct {
		name         string
		method, path string
		host, cookie string
		form         url.Values
		want         int
	}{
		{"no cookie", "GET", "/", host, "", nil, http.StatusUnauthorized},
		{"wrong cookie", "GET", "/", host, "nope", nil, http.StatusUnauthorized},
		{"wrong token in the URL", "GET", "/?token=nope", host, "", nil, http.StatusUnauthorized},
		{"the URL's token trades for a cookie", "GET", "/queues/orders-dlq?token=" + url.QueryEscape(tok), host, "", nil, http.StatusSeeOther},
		{"signed in", "GET", "/", host, tok, nil, http.StatusOK},
		{"localhost with the same port", "GET", "/", strings.Replace(host, "127.0.0.1", "localhost", 1), tok, nil, http.StatusOK},
		{"another Host (DNS rebinding)", "GET", "/", "evil.example:80", tok, nil, http.StatusMisdirectedRequest},
		{"another Host even with the token", "GET", "/?token=" + url.QueryEscape(tok), "evil.example:80", "", nil, http.StatusMisdirectedRequest},
		{"a POST without the CSRF token", "POST", "/queues/orders-dlq/actions", host, tok, url.Values{"action": {"replay"}}, http.StatusForbidden},
		{"a POST with a wrong CSRF token", "POST", "/queues/orders-dlq/actions", host, tok, url.Values{"action": {"replay"}, "csrf": {"x"}}, http.StatusForbidden},
		{"a POST with the CSRF token", "POST", "/queues/orders-dlq/actions", host, tok, url.Values{"action": {"replay"}, "csrf": {tok}}, http.StatusSeeOther},
	} {
		if got := plain(tc.method, tc.path, tc.host, tc.cookie, tc.form); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	// a cross-site form carries the Origin of its site
	req, _ := http.NewRequest(http.MethodPost, c.url("/queues/orders-dlq/actions"),
		strings.NewReader(url.Values{"action": {"replay"}, "csrf": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	if code, _ := c.do(req); code != http.StatusForbidden {
		t.Errorf("a POST from another origin: %d, want 403", code)
	}
	if n := len(c.fake.created); n != 1 {
		t.Errorf("%d actions created, want only the one with the token", n)
	}
	// the console answers under its own random path only, and its cookie is scoped to that path: a
	// browser sends it to no other console and no other server on 127.0.0.1 (cookies ignore ports)
	for _, p := range []string{"/", "/?token=" + url.QueryEscape(tok), "/queues/orders-dlq"} {
		req := httptest.NewRequest(http.MethodGet, p, nil)
		req.Host = host
		req.AddCookie(&http.Cookie{Name: cookieName, Value: tok})
		w := httptest.NewRecorder()
		c.srv.ServeHTTP(w, req)
		if w.Code != http.StatusNotFound {
			t.Errorf("GET %s outside the console's path %s: %d, want 404", p, c.srv.Base(), w.Code)
		}
	}
	if b := c.srv.Base(); len(b) < 20 || !strings.HasPrefix(b, "/") || !strings.HasSuffix(b, "/") {
		t.Errorf("base path %q: want /<random>/", b)
	}
	req = httptest.NewRequest(http.MethodGet, c.srv.path("/?token="+url.QueryEscape(tok)), nil)
	req.Host = host
	w := httptest.NewRecorder()
	c.srv.ServeHTTP(w, req)
	if ck := w.Result().Cookies(); len(ck) != 1 || ck[0].Path != c.srv.Base() || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode {
		t.Errorf("the session cookie %+v: want HTTP-only, strict, Path %s", ck, c.srv.Base())
	}
	// a sign-in code works only as OpenBrowser wrote it, once (TestUIOpensTheBrowserWithoutTheToken)
	for _, code := range []string{"", "nope", tok} {
		req = httptest.NewRequest(http.MethodPost, c.srv.path("/login"), strings.NewReader(url.Values{"code": {code}}.Encode()))
		req.Host = host
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w = httptest.NewRecorder()
		c.srv.ServeHTTP(w, req)
		if w.Code != http.StatusUnauthorized || len(w.Result().Cookies()) != 0 {
			t.Errorf("sign-in with code %q and no sign-in page: %d %v, want 401 and no cookie", code, w.Code, w.Result().Cookies())
		}
	}
	// the token leaves the URL once traded
	if code, _ := c.get("/?token=" + url.QueryEscape(tok)); code != http.StatusOK || c.lastURL != "/" {
		t.Errorf("after the token: %d at %s, want 200 at /", code, c.lastURL)
	}
}

func TestListenOnlyOnLoopback(t *testing.T) {
	srv, err := New(Options{Backend: newFakeBackend(testNow)})
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "example.com:80", "nonsense"} {
		if l, err := srv.Listen(addr); err == nil {
			l.Close()
			t.Errorf("Listen(%q) bound %s; want a refusal", addr, l.Addr())
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		l, err := srv.Listen(addr)
		if err != nil {
			t.Fatalf("Listen(%q): %v", addr, err)
		}
		got := l.Addr().String()
		l.Close()
		if !strings.HasPrefix(got, "127.0.0.1:") || !srv.hostAllowed(got) {
			t.Errorf("Listen(%q) bound %s (allowed as Host: %v)", addr, got, srv.hostAllowed(got))
		}
		if u := srv.URL(got); !strings.HasPrefix(u, "http://"+got+srv.Base()+"?token=") {
			t.Errorf("URL %q", u)
		}
	}
	other, _ := New(Options{Backend: newFakeBackend(testNow)})
	if other.Token() == srv.Token() || len(srv.Token()) < 40 {
		t.Errorf("tokens %q and %q: want random, 256 bits", srv.Token(), other.Token())
	}
}

func TestOverviewShowsEveryQueue(t *testing.T) {
	c := newConsole(t)
	code, body := c.get("/")
	if code != http.StatusOK {
		t.Fatalf("overview: %d", code)
	}
	mustContain(t, body, `href="`+c.srv.Base()+`queues/orders-dlq"`, `href="`+c.srv.Base()+`queues/payments-dlq"`, `data-testid="pending">60<`, `data-testid="pending">7<`,
		"max_retries_exceeded", "non_retriable_error", "Pending", "1.0/min", `<rect width="100"`, "not enough samples yet")
	// a later status refresh adds a sample: the sparkline appears
	c.fake.mu.Lock()
	c.fake.now = c.fake.now.Add(time.Minute)
	c.fake.letters["orders-dlq"] = c.fake.letters["orders-dlq"][:50]
	c.fake.countLocked("orders-dlq")
	c.fake.mu.Unlock()
	_, body = c.get("/")
	mustContain(t, body, "<polyline", "pending went from 60 to 50 over 1m0s (2 samples)")
}

func TestQueueBrowserFiltersAndPages(t *testing.T) {
	c := newConsole(t)
	code, body := c.get("/queues/orders-dlq?reason=deadline_exceeded&state=Pending&since=2026-11-23T11:00&pipeline=orders")
	if code != http.StatusOK {
		t.Fatalf("queue: %d %s", code, body)
	}
	f := c.fake.filters[len(c.fake.filters)-1]
	if len(f.Reasons) != 1 || f.Reasons[0] != "deadline_exceeded" || f.States[0] != "Pending" || f.Pipelines[0] != "orders" ||
		!f.Since.Equal(time.Date(2026, 11, 23, 11, 0, 0, 0, time.UTC)) || !f.Until.IsZero() {
		t.Fatalf("the backend was asked for %+v", f)
	}
	// deadline_exceeded is every third letter, orders every second: i%6 == 2, the last hour only
	mustContain(t, body, `<option value="deadline_exceeded" selected>deadline_exceeded</option>`, `<option value="shop/orders" selected>orders</option>`, `value="2026-11-23T11:00"`,
		"reason deadline_exceeded, pipeline shop/orders, state Pending, since 2026-11-23 11:00:00Z", `href="`+c.srv.Base()+`queues/orders-dlq/letters/0/1"`)
	if strings.Contains(body, "non_retriable_error</td>") {
		t.Error("a dead letter of another reason is listed")
	}
	// 60 letters, 25 a page: page 2 follows the continue token, keeping the filter
	_, body = c.get("/queues/orders-dlq?state=Pending")
	mustContain(t, body, "page 1, 35 more after it", `id="next-page"`)
	next := between(body, `href="`, `" rel="next"`)
	next = strings.ReplaceAll(next, "&amp;", "&")
	_, body = c.get(next)
	mustContain(t, body, "page 2, 10 more after it", "First page", `href="`+c.srv.Base()+`queues/orders-dlq/letters/1/12"`)
	if f := c.fake.filters[len(c.fake.filters)-1]; len(f.States) != 1 {
		t.Errorf("page 2 lost the filter: %+v", f)
	}
	if code, body := c.get("/queues/orders-dlq?state=Gone"); code != http.StatusBadRequest || !strings.Contains(body, "want one of Pending") {
		t.Errorf("a bad state: %d", code)
	}
	if code, _ := c.get("/queues/nope"); code != http.StatusNotFound {
		t.Errorf("a missing queue: %d", code)
	}
}

func between(s, a, b string) string {
	i := strings.Index(s, b)
	if i < 0 {
		return ""
	}
	j := strings.LastIndex(s[:i], a)
	if j < 0 {
		return ""
	}
	return s[j+len(a) : i]
}

func TestLetterDetail(t *testing.T) {
	c := newConsole(t)
	code, body := c.get("/queues/orders-dlq/letters/1/3")
	if code != http.StatusOK {
		t.Fatalf("letter: %d", code)
	}
	mustContain(t, body, "Dead letter 1/3", `id="letter-state">Pending<`, "non_retriable_error", "HTTP422", "sink answered HTTP422",
		"Value <small>(JSON,", "{\n  &#34;order&#34;: &#34;o-1007&#34;,\n  &#34;amount&#34;: 17.50,", "Idempotency-Key", "idem-7",
		`name="record" value="1/3"`, "order-1007")
	if code, _ := c.get("/queues/orders-dlq/letters/9/9"); code != http.StatusNotFound {
		t.Errorf("a missing letter: %d", code)
	}
	if code, _ := c.get("/queues/orders-dlq/letters/x/9"); code != http.StatusBadRequest {
		t.Errorf("a bad letter: %d", code)
	}
}

func TestActionsDryRunThenRunWithProgress(t *testing.T) {
	c := newConsole(t)
	c.fake.step = 4
	code, body := c.post("/queues/orders-dlq/actions", url.Values{"action": {"replay"}, "reason": {"max_retries_exceeded"}, "state": {"Pending"}})
	if code != http.StatusOK {
		t.Fatalf("preview: %d %s", code, body)
	}
	dry := c.fake.created[0]
	if dry.Spec.Mode != retryv1alpha1.ActionModeDryRun || dry.Spec.RequestedBy != "alice@example.com" || dry.Spec.Action != retryv1alpha1.DeadLetterReplay ||
		dry.Spec.Selector == nil || dry.Spec.Selector.Reasons[0] != "max_retries_exceeded" || dry.Spec.Selector.States[0] != "Pending" || dry.Namespace != "shop" {
		t.Fatalf("dry run created: %+v", dry)
	}
	mustContain(t, body, "Confirm: replay on queue orders-dlq", `<strong>20</strong> dead letters would be replayed`, `id="confirm"`, "Replay 20 dead letters")
	if c.lastURL != "/actions/"+dry.Name {
		t.Errorf("preview landed on %s", c.lastURL)
	}
	code, body = c.post("/actions/"+dry.Name+"/run", url.Values{"uid": {string(dry.UID)}})
	if code != http.StatusOK {
		t.Fatalf("run: %d %s", code, body)
	}
	run := c.fake.created[1]
	if run.Spec.Mode != retryv1alpha1.ActionModeRun || run.Spec.Selector.Reasons[0] != "max_retries_exceeded" || run.Spec.RequestedBy != "alice@example.com" {
		t.Fatalf("run created: %+v", run.Spec)
	}
	mustContain(t, body, `<progress id="progress" max="100"`, "Replay on queue orders-dlq")
	// the polling endpoint follows it to 100%
	var last string
	for range 20 {
		_, last = c.get("/api/actions/" + run.Name)
		if strings.Contains(last, `"finished":true`) {
			break
		}
	}
	mustContain(t, last, `"percent":100`, `"phase":"Succeeded"`, `"done":20`)
	_, body = c.get("/queues/orders-dlq/letters/0/0")
	mustContain(t, body, `id="letter-state">Replayed<`, "by alice@example.com", `href="`+c.srv.Base()+`actions/`+run.Name+`"`)
	// a finished run cannot be confirmed again, nor can a running dry run
	if code, _ := c.post("/actions/"+run.Name+"/run", url.Values{"uid": {string(run.UID)}}); code != http.StatusBadRequest {
		t.Errorf("confirming a run: %d", code)
	}
	_, body = c.get("/actions")
	mustContain(t, body, dry.Name, run.Name, "dry run", "Succeeded")
}

// TestConfirmRunsOnlyTheDryRunShown: the confirm form names the dry run it showed; someone who may
// delete and create actions in the namespace (a co-tenant bound to edit) can replace that dry run
// by one of the same name whose spec is theirs while the page is open. Confirming then must not
// create their spec as a Run with the confirming user's requestedBy (the record of decisions would
// say she asked for it).
func TestConfirmRunsOnlyTheDryRunShown(t *testing.T) {
	c := newConsole(t)
	code, body := c.post("/queues/orders-dlq/actions", url.Values{"action": {"resolve"}, "record": {"0/0"}, "note": {"checked by hand"}})
	if code != http.StatusOK {
		t.Fatalf("preview: %d %s", code, body)
	}
	mustContain(t, body, "Resolve 1 dead letter")
	dry := c.fake.created[0]
	form := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([a-z]+)" value="([^"]*)">`).FindAllStringSubmatch(body, -1) {
		form.Set(m[1], html.UnescapeString(m[2]))
	}
	// the co-tenant replaces it: same name, their spec (admission makes requestedBy theirs)
	c.fake.mu.Lock()
	swapped := c.fake.actions[dry.Name].DeepCopy()
	swapped.UID = "uid-of-bobs-action"
	swapped.Spec.Action, swapped.Spec.Note, swapped.Spec.RequestedBy = retryv1alpha1.DeadLetterIgnore, "bob's", "bob@example.com"
	swapped.Spec.Selector = &retryv1alpha1.DeadLetterSelector{States: []retryv1alpha1.DeadLetterState{retryv1alpha1.DeadLetterPending}}
	swapped.Status.Matched, swapped.Status.Done = 60, 60
	c.fake.actions[dry.Name] = swapped
	c.fake.mu.Unlock()
	code, body = c.post("/actions/"+dry.Name+"/run", form)
	if len(c.fake.created) > 1 {
		t.Fatalf("confirming the page of %s (Resolve 0/0) created %s %s of %+v requested by %s (%d)",
			dry.Name, c.fake.created[1].Spec.Action, c.fake.created[1].Spec.Mode, *c.fake.created[1].Spec.Selector, c.fake.created[1].Spec.RequestedBy, code)
	}
	if code != http.StatusBadRequest {
		t.Errorf("confirming a replaced dry run: %d %s", code, body)
	}
	mustContain(t, body, "replaced")
}

// TestRedirectsStayUnderTheBase: the redirects the router makes itself (a trailing slash added, a
// path cleaned) lead within the console, under its base path, not to the root of the address where
// nothing answers.
func TestRedirectsStayUnderTheBase(t *testing.T) {
	c := newConsole(t)
	c.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for path, want := range map[string]string{"static": "static/", "queues//orders-dlq": "queues/orders-dlq"} {
		req, _ := http.NewRequest(http.MethodGet, c.ts.URL+c.srv.Base()+path, nil)
		resp, err := c.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); loc != c.srv.Base()+want {
			t.Errorf("%s: redirected (%d) to %q, want %q", path, resp.StatusCode, loc, c.srv.Base()+want)
		}
	}
}

func TestActionFormsAreChecked(t *testing.T) {
	c := newConsole(t)
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"action": {"explode"}}, "want replay, resolve, ignore or purge"},
		{url.Values{"action": {"resolve"}, "record": {"0/1"}}, "resolve needs a note"},
		{url.Values{"action": {"purge"}}, "purge needs an until time"},
		{url.Values{"action": {"purge"}, "until": {"2026-11-23T11:30"}, "state": {"Pending"}}, "purge never deletes Pending dead letters"},
		{url.Values{"action": {"purge"}, "until": {"2026-11-23T11:30"}, "since": {"2026-11-23T10:30"}}, "clear since in the filter"},
		{url.Values{"action": {"replay"}, "record": {"0/x"}}, "want PARTITION/OFFSET"},
		{url.Values{"action": {"replay"}, "to_pipeline": {"a"}, "to_topic": {"b"}}, "not both"},
		{url.Values{"action": {"ignore"}, "note": {"n"}, "to_topic": {"b"}}, "replay only"},
	} {
		if code, body := c.post("/queues/orders-dlq/actions", tc.form); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("%v: %d, want 400 saying %q", tc.form, code, tc.want)
		}
	}
	if len(c.fake.created) != 0 {
		t.Errorf("%d actions created from wrong forms", len(c.fake.created))
	}
	// a resolve of one dead letter and a purge before a time
	c.post("/queues/orders-dlq/actions", url.Values{"action": {"resolve"}, "record": {"1/2"}, "note": {"fixed by hand"}})
	c.post("/queues/orders-dlq/actions", url.Values{"action": {"purge"}, "until": {"2026-11-23T11:30"}})
	c.post("/queues/orders-dlq/actions", url.Values{"action": {"replay"}, "record": {"1/2"}, "to_topic": {"orders.by-hand"}})
	_, body := c.get("/actions/" + c.fake.created[2].Name)
	mustContain(t, body, "Replayed to topic orders.by-hand.")
	if tg := c.fake.created[2].Spec.Target; tg == nil || tg.Topic != "orders.by-hand" || tg.Pipeline != "" {
		t.Errorf("replay target: %+v", tg)
	}
	res, purge := c.fake.created[0].Spec, c.fake.created[1].Spec
	if res.Action != retryv1alpha1.DeadLetterResolve || res.Note != "fixed by hand" || len(res.Selector.Records) != 1 || res.Selector.Records[0] != "1/2" {
		t.Errorf("resolve: %+v", res)
	}
	if purge.Action != retryv1alpha1.DeadLetterPurge || purge.Selector.Before == nil || len(purge.Selector.States) != 0 {
		t.Errorf("purge: %+v (the default states)", purge.Selector)
	}
}

func TestAPIErrorsAreShown(t *testing.T) {
	c := newConsole(t)
	c.fake.err = apierrors.NewForbidden(schema.GroupResource{Group: "retry.retryops.dev", Resource: "deadletterqueues"}, "", nil)
	code, body := c.get("/")
	if code != http.StatusForbidden {
		t.Fatalf("forbidden: %d", code)
	}
	mustContain(t, body, "role=\"alert\"", "forbidden", "RBAC permission")
	code, body = c.get("/api/actions/x")
	if code != http.StatusForbidden || !strings.Contains(body, `"error"`) {
		t.Errorf("API forbidden: %d %s", code, body)
	}
}

func TestStaticAssetsAreEmbedded(t *testing.T) {
	c := newConsole(t)
	for _, p := range []string{"/static/console.css", "/static/console.js", "/static/favicon.svg"} {
		if code, body := c.get(p); code != http.StatusOK || len(body) < 100 {
			t.Errorf("%s: %d, %d bytes", p, code, len(body))
		}
	}
}
