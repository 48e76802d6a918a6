package render_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/config"
)

// validConfig parses the rendered ConfigMap as the dispatcher does and fails t on any validation
// problem but the Secret files, which exist only in the pod.
func validConfig(t *testing.T, in *render.Inputs) *config.Config {
	t.Helper()
	cm := mustConfigMap(t, in)
	cfg, err := config.Parse([]byte(cm.Data[render.ConfigKey]))
	if err != nil {
		t.Fatalf("the dispatcher cannot parse the rendered config: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		var ve *config.ValidationError
		if !errors.As(err, &ve) {
			t.Fatal(err)
		}
		for _, p := range ve.Problems {
			if !strings.Contains(p, "is the Secret mounted?") {
				t.Errorf("invalid config: %s", p)
			}
		}
	}
	return cfg
}

// TestDrainingTiersReachTheDispatcherConfig: the tiers of earlier policies the controller lists in
// Inputs.Draining are topics.draining of the config, sorted, and the config is valid, with retries
// and without; names the dispatcher consumes anyway (a current tier, the source) or must never
// consume (the dead letter topic) are left out.
func TestDrainingTiersReachTheDispatcherConfig(t *testing.T) {
	for _, tc := range allCases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.inputs(t)
			source := string(in.Pipeline.Spec.Source.Topic)
			old := []string{source + ".retry.old-b", source + ".retry.old-a"}
			in.Draining = append([]string{}, old...)
			in.Draining = append(in.Draining, source, string(in.DLQ.Spec.Topic.Name))
			for _, tier := range in.Tiers {
				in.Draining = append(in.Draining, tier.Name)
			}
			cfg := validConfig(t, in)
			if want := []string{old[1], old[0]}; !reflect.DeepEqual(cfg.Topics.Draining, want) {
				t.Errorf("topics.draining %q, want %q", cfg.Topics.Draining, want)
			}
			if got := cfg.Topics.Retries; !reflect.DeepEqual(got, in.Tiers) {
				t.Errorf("tiers %+v, want the controller's %+v", got, in.Tiers)
			}
		})
	}
}

// TestNoDrainingTiersLeaveTheConfigAsItWas: without draining tiers the config has no
// topics.draining (so its hash, and the pods, do not change).
func TestNoDrainingTiersLeaveTheConfigAsItWas(t *testing.T) {
	in := sinkURIInputs(t)
	before := mustConfigMap(t, in)
	in.Draining = []string{}
	if after := mustConfigMap(t, in); render.ConfigHash(after) != render.ConfigHash(before) {
		t.Error("an empty draining list changes the config")
	}
	if strings.Contains(before.Data[render.ConfigKey], "draining") {
		t.Errorf("config mentions draining:\n%s", before.Data[render.ConfigKey])
	}
}

// TestTooManyDrainingTiersAreACallersMistake: the controller bounds the list at
// config.MaxDrainingTiers; more is an error, not a spec error.
func TestTooManyDrainingTiersAreACallersMistake(t *testing.T) {
	in := sinkURIInputs(t)
	for i := range config.MaxDrainingTiers {
		in.Draining = append(in.Draining, fmt.Sprintf("old.retry.%d", i))
	}
	if cfg := validConfig(t, in); len(cfg.Topics.Draining) != config.MaxDrainingTiers {
		t.Errorf("%d draining tiers, want %d", len(cfg.Topics.Draining), config.MaxDrainingTiers)
	}
	in.Draining = append(in.Draining, "old.retry.last")
	_, err := render.ConfigMap(in)
	var se *render.SpecError
	if err == nil || errors.As(err, &se) {
		t.Errorf("error %v, want a caller's mistake", err)
	}
}
