package render_test

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/config"
	sdkpolicy "github.com/retryops/retry-operator/sdk/policy"
)

// TestRenderDeliveryBatch: spec.delivery.batch becomes the config's delivery.batch, maxBytes in
// whole bytes from its Quantity (a fraction rounded up), the dispatcher's defaults for what the spec
// leaves out; a pipeline without it has none (one request per record).
func TestRenderDeliveryBatch(t *testing.T) {
	cases := []struct {
		name  string
		batch *retryv1alpha1.DeliveryBatch
		want  *config.Batch
	}{
		{name: "absent", batch: nil, want: nil},
		{name: "every field", batch: &retryv1alpha1.DeliveryBatch{MaxRecords: ptr.To[int32](250),
			MaxBytes: ptr.To(resource.MustParse("512Ki")), MaxWait: &metav1.Duration{Duration: 20 * time.Millisecond}},
			want: &config.Batch{MaxRecords: 250, MaxBytes: 512 << 10, MaxWait: sdkpolicy.PD(20 * time.Millisecond)}},
		{name: "a fractional quantity and no wait", batch: &retryv1alpha1.DeliveryBatch{MaxBytes: ptr.To(resource.MustParse("1.5")),
			MaxWait: &metav1.Duration{}},
			want: &config.Batch{MaxRecords: config.DefaultBatchMaxRecords, MaxBytes: 2, MaxWait: &sdkpolicy.Duration{}}},
		{name: "empty: the defaults", batch: &retryv1alpha1.DeliveryBatch{},
			want: &config.Batch{MaxRecords: config.DefaultBatchMaxRecords, MaxBytes: config.DefaultBatchMaxBytes,
				MaxWait: sdkpolicy.PD(config.DefaultBatchMaxWait)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := sinkURIInputs(t)
			in.Pipeline.Spec.Delivery.Batch = c.batch
			cfg, err := render.Config(in)
			if err != nil {
				t.Fatalf("Config: %v", err)
			}
			got := cfg.Delivery.Batch
			if (got == nil) != (c.want == nil) {
				t.Fatalf("delivery.batch %+v, want %+v", got, c.want)
			}
			if got == nil {
				return
			}
			if got.MaxRecords != c.want.MaxRecords || got.MaxBytes != c.want.MaxBytes || *got.MaxWait != *c.want.MaxWait {
				t.Errorf("delivery.batch {%d %d %v}, want {%d %d %v}", got.MaxRecords, got.MaxBytes, got.MaxWait, c.want.MaxRecords, c.want.MaxBytes, c.want.MaxWait)
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("the rendered config is invalid: %v", err)
			}
		})
	}
}
