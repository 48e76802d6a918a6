package dlqapi

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
)

// cursor is the position a continue token holds.
type cursor struct {
	// Namespace the list was of.
	Namespace string `json:"n"`
	// Queue, Partition and Offset: the next dead letter to read.
	Queue     string `json:"q"`
	Partition int32  `json:"p"`
	Offset    int64  `json:"o"`
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s, namespace string) (cursor, error) {
	var c cursor
	bad := apierrors.NewBadRequest("invalid continue token: start the list again without --continue")
	if len(s) > 1024 {
		return c, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil {
		return c, bad
	}
	if c.Namespace != namespace || len(validation.IsDNS1123Subdomain(c.Queue)) > 0 || c.Partition < 0 || c.Offset < 0 {
		return c, bad
	}
	return c, nil
}

// maxFieldRequirements bounds the requirements of a list's field selector.
const maxFieldRequirements = 100

// exactFields are the field selectors matched whole against a dead letter (besides since and until).
var exactFields = map[string]bool{
	"metadata.name": true, "metadata.namespace": true,
	dlv1.FieldQueue: true, dlv1.FieldReason: true, dlv1.FieldErrorType: true, dlv1.FieldPipeline: true,
}

// match is what a field selector asks of one field: any of anyOf (when not empty), none of noneOf.
type match struct {
	anyOf, noneOf map[string]bool
}

func (m *match) ok(v string) bool {
	return (len(m.anyOf) == 0 || m.anyOf[v]) && !m.noneOf[v]
}

// filter is what a list selects.
type filter struct {
	labels       labels.Selector
	fields       map[string]*match
	since, until time.Time
}

func newFilter(opts *metainternalversion.ListOptions) (*filter, error) {
	f := &filter{labels: labels.Everything(), fields: map[string]*match{}}
	if opts == nil {
		return f, nil
	}
	if opts.LabelSelector != nil {
		f.labels = opts.LabelSelector
	}
	if opts.FieldSelector == nil {
		return f, nil
	}
	reqs := opts.FieldSelector.Requirements()
	if len(reqs) > maxFieldRequirements {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("field selector: %d requirements, at most %d", len(reqs), maxFieldRequirements))
	}
	for _, r := range reqs {
		eq := r.Operator == selection.Equals || r.Operator == selection.DoubleEquals
		if !eq && r.Operator != selection.NotEquals {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("field selector %s: operator %s not supported", r.Field, r.Operator))
		}
		switch {
		case r.Field == dlv1.FieldSince || r.Field == dlv1.FieldUntil:
			if !eq {
				return nil, apierrors.NewBadRequest(r.Field + " takes = only")
			}
			t, err := time.Parse(time.RFC3339, r.Value)
			if err != nil {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("field selector %s=%q: not an RFC 3339 time", r.Field, cut(r.Value, 64)))
			}
			if r.Field == dlv1.FieldSince {
				f.since = t
			} else {
				f.until = t
			}
		case exactFields[r.Field]:
			m := f.fields[r.Field]
			if m == nil {
				m = &match{anyOf: map[string]bool{}, noneOf: map[string]bool{}}
				f.fields[r.Field] = m
			}
			if eq {
				m.anyOf[r.Value] = true
			} else {
				m.noneOf[r.Value] = true
			}
		default:
			return nil, apierrors.NewBadRequest(fieldLabelError(r.Field).Error())
		}
	}
	return f, nil
}

// cut is s cut to n bytes, for messages.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func (f *filter) matchTime(t time.Time) bool {
	return (f.since.IsZero() || !t.Before(f.since)) && (f.until.IsZero() || t.Before(f.until))
}

// matchField reports whether the value of field meets the field selector.
func (f *filter) matchField(field, value string) bool {
	m := f.fields[field]
	return m == nil || m.ok(value)
}

// matchQueue reports whether the dead letters of queue name can match: its name meets the field
// selector, and its label value the label selector's exact queue requirement.
func (f *filter) matchQueue(name string) bool {
	if !f.matchField(dlv1.FieldQueue, name) {
		return false
	}
	if v, ok := f.labels.RequiresExactMatch(dlv1.LabelQueue); ok && dlv1.LabelValue(name) != v {
		return false
	}
	return true
}

// matchEntry reports whether the dead letter e of queue, with its labels, meets the field and label
// selectors (not the time: see matchTime).
func (f *filter) matchEntry(ns, queue string, e *deadletters.Entry, lbls map[string]string) bool {
	return f.matchField("metadata.name", Name(queue, e.ID)) && f.matchField("metadata.namespace", ns) &&
		f.matchField(dlv1.FieldQueue, queue) && f.matchField(dlv1.FieldReason, e.Reason) &&
		f.matchField(dlv1.FieldErrorType, e.ErrorType) && f.matchField(dlv1.FieldPipeline, e.Pipeline) &&
		f.labels.Matches(labels.Set(lbls))
}
