package dlqcli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clocktesting "k8s.io/utils/clock/testing"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dlqui"
)

// recordingBackend is a console backend that keeps the actions created.
type recordingBackend struct {
	mu      sync.Mutex
	created []*retryv1alpha1.DeadLetterAction
}

func (b *recordingBackend) Namespace() string { return "shop" }
func (b *recordingBackend) ListQueues(context.Context) ([]retryv1alpha1.DeadLetterQueue, error) {
	return nil, nil
}
func (b *recordingBackend) GetQueue(_ context.Context, name string) (*retryv1alpha1.DeadLetterQueue, error) {
	return &retryv1alpha1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}, nil
}
func (b *recordingBackend) ListLetters(context.Context, string, dlqui.Filter, int64, string) (*dlv1.DeadLetterList, error) {
	return &dlv1.DeadLetterList{}, nil
}
func (b *recordingBackend) GetLetter(context.Context, string, int32, int64) (*dlv1.DeadLetter, error) {
	return &dlv1.DeadLetter{}, nil
}
func (b *recordingBackend) ListActions(context.Context) ([]retryv1alpha1.DeadLetterAction, error) {
	return nil, nil
}
func (b *recordingBackend) GetAction(_ context.Context, name string) (*retryv1alpha1.DeadLetterAction, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range b.created {
		if a.Name == name {
			return a.DeepCopy(), nil
		}
	}
	return nil, fmt.Errorf("no action %s", name)
}
func (b *recordingBackend) CreateAction(_ context.Context, a *retryv1alpha1.DeadLetterAction) (*retryv1alpha1.DeadLetterAction, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a = a.DeepCopy()
	a.Name = fmt.Sprintf("%s%d", a.GenerateName, len(b.created))
	b.created = append(b.created, a)
	return a.DeepCopy(), nil
}
func (b *recordingBackend) WhoAmI(context.Context) (string, error) { return "alice", nil }

// consoleAction posts form as the console's action form and returns the spec of the dry run it
// created, or the page's status when it created none.
func consoleAction(t *testing.T, queue string, form url.Values) (*retryv1alpha1.DeadLetterActionSpec, int) {
	t.Helper()
	b := &recordingBackend{}
	srv, err := dlqui.New(dlqui.Options{Backend: b, Clock: clocktesting.NewFakePassiveClock(testNow)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	srv.SetAddress(ts.Listener.Addr().String())
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(ts.URL + srv.Base() + "?token=" + url.QueryEscape(srv.Token()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	form.Set("csrf", srv.Token())
	req, _ := http.NewRequest(http.MethodPost, ts.URL+srv.Base()+"queues/"+queue+"/actions", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", ts.URL)
	if resp, err = c.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(b.created) == 0 {
		return nil, resp.StatusCode
	}
	return &b.created[0].Spec, resp.StatusCode
}

// pluginAction is the spec kubectl dlq builds from a (its flags, parsed), as a dry run.
func pluginAction(t *testing.T, a *actOptions, queue string, records []string) (*retryv1alpha1.DeadLetterActionSpec, error) {
	t.Helper()
	o := newOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}})
	o.clock = clocktesting.NewFakePassiveClock(testNow)
	a.dryRun = true
	r, err := a.request(o, queue, records)
	if err != nil {
		return nil, err
	}
	act, err := r.Build("shop", "alice")
	if err != nil {
		return nil, flagError(err)
	}
	return &act.Spec, nil
}

// The console and kubectl dlq, given the same filter, create the same DeadLetterAction (the
// brief of ActionRequest.Build). Each row is one request as the console's form and as the plugin's
// flags; the two specs are compared as the API server receives them (JSON).
func TestConsoleAndPluginBuildTheSameAction(t *testing.T) {
	for _, tc := range []struct {
		name    string
		form    url.Values
		kind    actKind
		sel     selectorFlags
		note    string
		toPipe  string
		records []string
		// refused is set where both surfaces refuse the request: the console with 400, the plugin
		// with a usage error.
		refused bool
	}{
		{name: "a reason", form: url.Values{"action": {"replay"}, "reason": {"max_retries_exceeded"}},
			kind: actReplay, sel: selectorFlags{reasons: []string{"max_retries_exceeded"}}},
		{name: "a bare pipeline name", form: url.Values{"action": {"replay"}, "pipeline": {"orders"}},
			kind: actReplay, sel: selectorFlags{pipelines: []string{"orders"}}},
		{name: "another namespace's pipeline", form: url.Values{"action": {"replay"}, "pipeline": {"other/orders"}},
			kind: actReplay, sel: selectorFlags{pipelines: []string{"other/orders"}}},
		{name: "a pipeline of three parts", form: url.Values{"action": {"replay"}, "pipeline": {"a/b/c"}},
			kind: actReplay, sel: selectorFlags{pipelines: []string{"a/b/c"}}},
		{name: "a lookalike namespace (Cyrillic o)", form: url.Values{"action": {"replay"}, "pipeline": {"sh\u043ep/orders"}},
			kind: actReplay, sel: selectorFlags{pipelines: []string{"sh\u043ep/orders"}}},
		{name: "a pipeline of 300 characters", form: url.Values{"action": {"replay"}, "pipeline": {"shop/" + strings.Repeat("p", 295)}},
			kind: actReplay, sel: selectorFlags{pipelines: []string{"shop/" + strings.Repeat("p", 295)}}},
		{name: "a pipeline with a blank before it", form: url.Values{"action": {"replay"}, "pipeline": {" orders"}},
			kind: actReplay, sel: selectorFlags{pipelines: []string{" orders"}}},
		{name: "since and until", form: url.Values{"action": {"replay"}, "since": {"2026-11-23T10:00"}, "until": {"2026-11-23T11:00"}},
			kind: actReplay, sel: selectorFlags{since: "2026-11-23T10:00:00Z", until: "2026-11-23T11:00:00Z"}},
		{name: "a replay to a pipeline", form: url.Values{"action": {"replay"}, "record": {"0/1"}, "to_pipeline": {"orders-v2"}},
			kind: actReplay, toPipe: "orders-v2", records: []string{"0/1"}},
		{name: "a resolve of one dead letter", form: url.Values{"action": {"resolve"}, "record": {"0/1"}, "note": {"fixed"}},
			kind: actResolve, note: "fixed", records: []string{"0/1"}},
		{name: "a resolve whose note has blanks around it", form: url.Values{"action": {"resolve"}, "record": {"0/1"}, "note": {" fixed "}},
			kind: actResolve, note: " fixed ", records: []string{"0/1"}},
		{name: "a purge of Resolved before a time", form: url.Values{"action": {"purge"}, "state": {"Resolved"}, "until": {"2026-11-01T00:00"}},
			kind: actPurge, sel: selectorFlags{purge: true, states: []string{"Resolved"}, until: "2026-11-01T00:00:00Z"}},
		{name: "a purge of the Pending filter before a time", form: url.Values{"action": {"purge"}, "state": {"Pending"}, "until": {"2026-11-01T00:00"}},
			kind: actPurge, sel: selectorFlags{purge: true, states: []string{"Pending"}, until: "2026-11-01T00:00:00Z"}, refused: true},
		{name: "a purge since a time", form: url.Values{"action": {"purge"}, "since": {"2026-10-01T00:00"}, "until": {"2026-11-01T00:00"}},
			kind: actPurge, sel: selectorFlags{purge: true, since: "2026-10-01T00:00:00Z", until: "2026-11-01T00:00:00Z"}, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			console, status := consoleAction(t, "orders-dlq", tc.form)
			plugin, err := pluginAction(t, &actOptions{kind: tc.kind, sel: tc.sel, note: tc.note, toPipeline: tc.toPipe}, "orders-dlq", tc.records)
			if tc.refused {
				g.Expect(console).To(BeNil(), "the console created an action")
				g.Expect(status).To(Equal(http.StatusBadRequest))
				g.Expect(exitCode(err)).To(Equal(ExitUsage), "the plugin: %v", err)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(console).NotTo(BeNil(), "the console created nothing (%d)", status)
			c, _ := json.Marshal(console)
			p, _ := json.Marshal(plugin)
			g.Expect(string(c)).To(Equal(string(p)), "console:\n%s\nplugin:\n%s", c, p)
		})
	}
}
