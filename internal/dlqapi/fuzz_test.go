package dlqapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
	"github.com/retryops/retry-operator/sdk/headers"
)

// FuzzListParameters lists with any limit, continue token, label and field selector: every list
// ends (within its context), answers a page of at most MaxListItems (and limit) dead letters that
// match the label selector, or refuses with a status error; following its continue tokens never
// repeats a dead letter and ends. Its seeds run in go test; make fuzz runs it.
func FuzzListParameters(f *testing.F) {
	kf := kafkafake.New()
	var recs []kafka.ProduceRecord
	for i := range 60 {
		recs = append(recs, letter(i, headers.Reason, []string{"max_retries_exceeded", "HTTP 500", "a,b=c"}[i%3],
			headers.ErrorType, []string{"HTTP/500", "HTTP_500", `x\y`}[i%3], headers.Pipeline, "shop/orders"))
	}
	put(f, kf, "a.dlq", recs...)
	put(f, kf, "b.dlq", recs[:7]...)
	kf.AddTopic("gap.dlq", 2, 1, nil)
	kf.SetOffsets("gap.dlq", 1, 0, 300000)
	s := &dlqapi.Storage{Queues: dlqapi.StaticQueues{"shop": {
		{Name: "a-dlq", Topic: "a.dlq", Conn: fakeConn}, {Name: "b-dlq", Topic: "b.dlq", Conn: fakeConn},
		{Name: "down-dlq", Topic: "down.dlq", Conn: downConn}, {Name: "gap-dlq", Topic: "gap.dlq", Conn: fakeConn},
	}}, Kafka: &fakeKafka{Fake: kf}}
	// A valid continue token from the middle of a-dlq.
	first, err := s.List(inShop(), &metainternalversion.ListOptions{Limit: 5})
	if err != nil {
		f.Fatal(err)
	}
	token := first.(*dlv1.DeadLetterList).Continue
	for _, seed := range []struct {
		limit                  int64
		cont, labels, fieldSel string
	}{
		{0, "", "", ""},
		{1 << 61, "", "", ""},
		{4e18, "", "", ""},
		{-1, "", "", ""},
		{1 << 62, token, "", ""},
		{3, token, dlv1.LabelReason + "=HTTP_500", ""},
		{2, "", dlv1.LabelQueue + "=a-dlq", "reason=HTTP 500,reason=a\\,b\\=c"},
		{0, "", "", "queue=gap-dlq,errorType!=HTTP/500"},
		{7, "", dlv1.LabelState + " in (Pending,Resolved)", "since=2026-11-01T00:00:10Z,until=2026-11-01T00:00:30Z"},
		{1, "", "", "metadata.name=a-dlq.0.3"},
		{1, "", "", "queue=down-dlq"},
		{10, "eyJuIjoic2hvcCIsInEiOiJhLWRscSIsInAiOjAsIm8iOjkyMjMzNzIwMzY4NTQ3NzU4MDd9", "", ""},
		{0, "", "", "nope=1"},
		{0, "", "", strings.Repeat("reason=x,", 200) + "reason=y"},
	} {
		f.Add(seed.limit, seed.cont, seed.labels, seed.fieldSel)
	}
	f.Fuzz(func(t *testing.T, limit int64, cont, labelSel, fieldSel string) {
		ls, err := labels.Parse(labelSel)
		if err != nil {
			return
		}
		fs, err := fields.ParseSelector(fieldSel)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(inShop(), 30*time.Second)
		defer cancel()
		opts := metainternalversion.ListOptions{Limit: limit, Continue: cont, LabelSelector: ls, FieldSelector: fs}
		seen := map[string]bool{}
		for pages := 0; ; pages++ {
			if pages > 1000 {
				t.Fatalf("more than 1000 pages")
			}
			obj, err := s.List(ctx, &opts)
			if err != nil {
				if _, ok := err.(apierrors.APIStatus); !ok || ctx.Err() != nil {
					t.Fatalf("page %d: %v", pages, err)
				}
				return
			}
			l := obj.(*dlv1.DeadLetterList)
			bound := int64(dlv1.MaxListItems)
			if limit > 0 {
				bound = min(bound, limit)
			}
			if int64(len(l.Items)) > bound {
				t.Fatalf("page %d: %d items, limit %d", pages, len(l.Items), limit)
			}
			for _, d := range l.Items {
				if seen[d.Name] {
					t.Fatalf("page %d: %s again", pages, d.Name)
				}
				seen[d.Name] = true
				if !ls.Matches(labels.Set(d.Labels)) {
					t.Fatalf("%s: labels %v do not match %s", d.Name, d.Labels, ls)
				}
			}
			if l.Continue == "" {
				return
			}
			opts.Continue = l.Continue
		}
	})
}
