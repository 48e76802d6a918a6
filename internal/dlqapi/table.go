package dlqapi

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	"github.com/retryops/retry-operator/internal/termsafe"
)

// ConvertToTable implements rest.TableConvertor: name, queue, pipeline, reason, error, attempts,
// state and age.
func (s *Storage) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	now := s.clock().Now
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: "<queue>.<partition>.<offset>"},
		{Name: "Queue", Type: "string", Description: "The DeadLetterQueue."},
		{Name: "Pipeline", Type: "string", Description: "The pipeline that dead-lettered it."},
		{Name: "Reason", Type: "string", Description: "Why it was dead-lettered."},
		{Name: "Error", Type: "string", Description: "The last error's type."},
		{Name: "Attempts", Type: "integer", Description: "Deliveries made."},
		{Name: "State", Type: "string", Description: "Pending, Replayed, Resolved or Ignored."},
		{Name: "Age", Type: "string", Description: "Time since it was dead-lettered."},
	}}
	row := func(d *dlv1.DeadLetter) metav1.TableRow {
		return metav1.TableRow{
			Cells: []any{d.Name, d.Queue, termsafe.Line(d.Pipeline), termsafe.Line(d.Reason), termsafe.Line(d.ErrorType), int64(d.Attempts), string(d.State.State),
				duration.HumanDuration(now().Sub(d.CreationTimestamp.Time))},
			Object: runtime.RawExtension{Object: d},
		}
	}
	switch o := obj.(type) {
	case *dlv1.DeadLetter:
		t.Rows = []metav1.TableRow{row(o)}
	case *dlv1.DeadLetterList:
		t.Continue = o.Continue
		t.ResourceVersion = o.ResourceVersion
		t.Rows = make([]metav1.TableRow, len(o.Items))
		for i := range o.Items {
			t.Rows[i] = row(&o.Items[i])
		}
	default:
		return nil, fmt.Errorf("cannot print %T as a table", obj)
	}
	return t, nil
}
