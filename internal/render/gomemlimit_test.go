package render_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/retryops/retry-operator/internal/render"
)

// goMemLimitOf returns the GOMEMLIMIT of the Deployment's containers ("" when unset), failing when
// two containers disagree or one sets it twice.
func goMemLimitOf(t *testing.T, in *render.Inputs) (string, bool) {
	t.Helper()
	dep := mustDeployment(t, in)
	var (
		value string
		found bool
	)
	for _, c := range dep.Spec.Template.Spec.Containers {
		n := 0
		for _, e := range c.Env {
			if e.Name == render.EnvGoMemLimit {
				n++
				if found && e.Value != value {
					t.Fatalf("containers disagree on %s: %q and %q", render.EnvGoMemLimit, value, e.Value)
				}
				value, found = e.Value, true
			}
		}
		if n > 1 {
			t.Fatalf("container %s sets %s %d times", c.Name, render.EnvGoMemLimit, n)
		}
	}
	return value, found
}

// The dispatcher's GOMEMLIMIT is GoMemLimitPercent (90%) of its container's memory limit, a plain
// byte count, whatever unit the limit is written in; without a memory limit there is none, and a
// pod template (the user's containers) gets none from the operator.
func TestGoMemLimitFollowsTheMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits corev1.ResourceList // nil: DefaultDispatcherResources
		want   string              // "": not set
	}{
		{name: "the default 512Mi", want: "483183820"}, // 536870912 × 0.9, rounded down
		{name: "1Gi", limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}, want: "966367641"},
		{name: "decimal units", limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("300M")}, want: "270000000"},
		{name: "fractional bytes round up first", limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1000.5")}, want: "900"}, // 1001 bytes},
		{name: "a CPU limit only", limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		{name: "no limits", limits: corev1.ResourceList{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := sinkURIInputs(t)
			if tc.limits != nil {
				res := render.DefaultDispatcherResources()
				res.Limits = tc.limits
				in.DispatcherResources = &res
			}
			got, ok := goMemLimitOf(t, in)
			if tc.want == "" {
				if ok {
					t.Fatalf("%s=%s without a memory limit", render.EnvGoMemLimit, got)
				}
				return
			}
			if !ok || got != tc.want {
				t.Fatalf("%s=%q (set: %v), want %q", render.EnvGoMemLimit, got, ok, tc.want)
			}
		})
	}
	for _, in := range []*render.Inputs{templateMinimalInputs(t), templateUserSettingsInputs(t)} {
		if got, ok := goMemLimitOf(t, in); ok {
			t.Errorf("template mode %s: the operator set %s=%s on the user's containers", in.Pipeline.Name, render.EnvGoMemLimit, got)
		}
	}
}
