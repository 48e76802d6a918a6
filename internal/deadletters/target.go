package deadletters

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/sdk/headers"
)

// ErrOtherPipelineRecord is wrapped, with ErrNoTarget, by the error of a Replay's default target
// for a dead letter of a record of another pipeline's retry tier (Entry.OtherPipelineRecord): the
// dead letter is skipped (SkipOtherPipeline) unless the action names its target.
var ErrOtherPipelineRecord = errors.New("a record of another pipeline's retry tier")

// otherPipelineError is the error of the default target of e, a dead letter of a record of
// another pipeline's retry tier.
func otherPipelineError(e *Entry) error {
	return fmt.Errorf("%w: %w: dead letter %s was refused by pipeline %s, which its retryops.pipeline names; "+
		"replaying it there would deliver it to the sink it was kept from: set spec.target.pipeline or spec.target.topic",
		ErrNoTarget, ErrOtherPipelineRecord, e.ID, cutString(e.Pipeline, 317))
}

// PipelineTier finds the replay target of the pipeline namespace/name: its first retry tier (which
// only its consumer group reads) and the connection to its cluster. It returns an error wrapping
// ErrNoTarget when there is no such pipeline or it has no retry tier yet; any other error (an API
// read failing) stops the run.
type PipelineTier func(ctx context.Context, namespace, name string) (Target, error)

// Targets returns the Target function of an action in namespace: with spec.target.topic, that topic
// on the dead letter topic's connection dlqConn; with spec.target.pipeline, that pipeline's tier
// (tier); otherwise each dead letter's own pipeline (its retryops.pipeline header) through tier, and
// only a pipeline of the action's own namespace: a header naming another namespace's pipeline, or
// none, is ErrNoTarget, so that an action never writes into another namespace's topics, and so is a
// dead letter of a record of another pipeline's retry tier (ErrOtherPipelineRecord too). Lookups are
// remembered for the run (a pipeline is looked up once). The function is safe for concurrent use.
func Targets(spec *retryv1alpha1.ReplayTarget, namespace string, dlqConn kafka.Connection, tier PipelineTier) func(ctx context.Context, e *Entry) (Target, error) {
	if spec != nil && spec.Topic != "" {
		t := Target{Topic: string(spec.Topic), Conn: dlqConn}
		return func(context.Context, *Entry) (Target, error) { return t, nil }
	}
	var (
		mu   sync.Mutex
		seen = map[string]Target{}
		errs = map[string]error{}
	)
	lookup := func(ctx context.Context, name string) (Target, error) {
		mu.Lock()
		defer mu.Unlock()
		if t, ok := seen[name]; ok {
			return t, nil
		}
		if err, ok := errs[name]; ok {
			return Target{}, err
		}
		t, err := tier(ctx, namespace, name)
		t.Pipeline = namespace + "/" + name
		if err == nil && !headers.ValidTopicName(t.Topic) {
			err = fmt.Errorf("%w: pipeline %s/%s gave the invalid topic %q", ErrNoTarget, namespace, name, cutString(t.Topic, 64))
		}
		switch {
		case err == nil:
			seen[name] = t
		case errors.Is(err, ErrNoTarget):
			errs[name] = err
		}
		return t, err
	}
	if spec != nil && spec.Pipeline != "" {
		return func(ctx context.Context, _ *Entry) (Target, error) { return lookup(ctx, spec.Pipeline) }
	}
	return func(ctx context.Context, e *Entry) (Target, error) {
		if e.OtherPipelineRecord() {
			return Target{}, otherPipelineError(e)
		}
		ns, name, ok := e.PipelineRef()
		if !ok {
			return Target{}, fmt.Errorf("%w: dead letter %s names no pipeline", ErrNoTarget, e.ID)
		}
		if ns != namespace {
			return Target{}, fmt.Errorf("%w: dead letter %s names pipeline %s/%s, outside the action's namespace %s", ErrNoTarget, e.ID, cutString(ns, 63), cutString(name, 253), namespace)
		}
		return lookup(ctx, name)
	}
}

// retryTierName matches the names the operator gives retry tiers (dispatchercfg.BuildTiers):
// <source>.retry.<attempt> and <source>.retry.<delay>[-<tier>]. The API's CEL rule on
// spec.target.topic is the same expression.
var retryTierName = regexp.MustCompile(`[.]retry[.][0-9][0-9a-zA-Z.]*(-[0-9]+)?$`)

// CheckTopicTarget refuses, by its name alone, a spec.target.topic that is a record of decisions (a
// name ending in StateTopicSuffix, of any queue) or a retry tier of any pipeline: a replay written
// there would record decisions under any requestedBy, or reach another pipeline's consumer group as
// one of its retries. Topics the operator manages under other names (dead-letter topics) are known
// only to the topic ledger, which the caller checks.
func CheckTopicTarget(topic string) error {
	switch {
	case strings.HasSuffix(topic, StateTopicSuffix):
		return fmt.Errorf("is named like a queue's record of decisions (ending in %q), which only the operator writes", StateTopicSuffix)
	case IsRetryTierName(topic):
		return errors.New("is named like a pipeline's retry topic (<source>.retry.<n> or <source>.retry.<delay>)")
	}
	return nil
}

// IsRetryTierName reports whether topic is named as the operator names retry tiers.
func IsRetryTierName(topic string) bool { return retryTierName.MatchString(topic) }
