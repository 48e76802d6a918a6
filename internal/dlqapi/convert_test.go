package dlqapi

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/fields"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
)

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		queue string
		id    deadletters.ID
		ok    bool
	}{
		{"orders-dlq.0.17", "orders-dlq", deadletters.ID{Partition: 0, Offset: 17}, true},
		{"a.b.c.2.9", "a.b.c", deadletters.ID{Partition: 2, Offset: 9}, true},
		{"q.01.2", "", deadletters.ID{}, false},
		{"q.1", "", deadletters.ID{}, false},
		{".1.2", "", deadletters.ID{}, false},
		{"q.-1.2", "", deadletters.ID{}, false},
		{"q.1.x", "", deadletters.ID{}, false},
	} {
		q, id, ok := ParseName(tc.name)
		if ok != tc.ok || (ok && (q != tc.queue || id != tc.id)) {
			t.Errorf("ParseName(%q) = %q, %v, %v", tc.name, q, id, ok)
		}
		if ok && Name(q, id) != tc.name {
			t.Errorf("Name(%q, %v) = %q", q, id, Name(q, id))
		}
	}
}

func TestPayload(t *testing.T) {
	if p := payload(nil, 10); p != nil {
		t.Errorf("nil: %+v", p)
	}
	p := payload([]byte("héllo wörld"), 2) // é is bytes 1 and 2: cut before it
	if p.Data != "h" || !p.Truncated || p.Size != 13 || p.Encoding != dlv1.EncodingText {
		t.Errorf("text cut: %+v", p)
	}
	p = payload([]byte{0xff, 0x00, 0x01}, 0)
	if p.Data != "/wAB" || p.Truncated || p.Encoding != dlv1.EncodingBase64 {
		t.Errorf("binary: %+v", p)
	}
}

func TestContinueTokens(t *testing.T) {
	c := cursor{Namespace: "shop", Queue: "orders-dlq", Partition: 2, Offset: 40}
	got, err := decodeCursor(c.encode(), "shop")
	if err != nil || got != c {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for name, tok := range map[string]string{
		"other namespace": c.encode(),
		"not base64":      "!!!",
		"not JSON":        "bm90LWpzb24",
		"bad queue":       cursor{Namespace: "other", Queue: "Bad Queue"}.encode(),
		"negative offset": cursor{Namespace: "other", Queue: "q", Offset: -1}.encode(),
		"too long":        strings.Repeat("a", 2000),
	} {
		if _, err := decodeCursor(tok, "other"); !apierrors.IsBadRequest(err) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestListRefusesBadRequests(t *testing.T) {
	s := &Storage{Queues: StaticQueues{}}
	ctx := genericapirequest.WithNamespace(context.Background(), "shop")
	for name, tc := range map[string]struct {
		ctx  context.Context
		opts *metainternalversion.ListOptions
	}{
		"all namespaces":   {context.Background(), &metainternalversion.ListOptions{}},
		"since not a time": {ctx, &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("since", "yesterday")}},
		"since with !=":    {ctx, &metainternalversion.ListOptions{FieldSelector: fields.OneTermNotEqualSelector("since", "2026-11-01T00:00:00Z")}},
		"forged continue":  {ctx, &metainternalversion.ListOptions{Continue: "eyJuIjoib3RoZXIifQ"}},
	} {
		if _, err := s.List(tc.ctx, tc.opts); !apierrors.IsBadRequest(err) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// No queue: an empty list.
	obj, err := s.List(ctx, &metainternalversion.ListOptions{})
	if err != nil || len(obj.(*dlv1.DeadLetterList).Items) != 0 {
		t.Fatalf("%v %v", obj, err)
	}
}
