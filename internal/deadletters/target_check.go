package deadletters

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/retryops/retry-operator/sdk/headers"
)

// ErrTargetRefused is wrapped by Run's error when a Replay's target is a topic a replay never
// writes into; nothing is written for the dead letter that has it.
var ErrTargetRefused = errors.New("replay target refused")

// Holder is a resource whose topic-ledger record holds a topic (kafkaspec.Ledger.Holders): the
// operator manages the topic for it. Topics are all the topics the record holds.
type Holder struct {
	Kind, Namespace, Name string
	Topics                []string
}

func (h Holder) String() string { return fmt.Sprintf("%s %s/%s", h.Kind, h.Namespace, h.Name) }

// TopicHolders returns the resources whose topic-ledger record holds topic.
type TopicHolders func(ctx context.Context, topic string) ([]Holder, error)

// TopicRole names what topic is to h, whose record holds it, and whether a replay may write into
// it as a topic the action names: only a pipeline's source topic (every consumer group of that
// topic receives the records).
func TopicRole(h Holder, topic string) (role string, allowed bool) {
	switch h.Kind {
	case "DeadLetterQueue":
		for _, t := range h.Topics {
			if topic == t+StateTopicSuffix {
				return "record of decisions", false
			}
		}
		return "dead-letter topic", false
	case "ConsumerPipeline":
		if IsRetryTierName(topic) {
			return "retry topic", false
		}
		for _, other := range h.Topics {
			if strings.HasPrefix(topic, other+".retry.") {
				return "retry topic", false
			}
		}
		return "source topic", true
	default:
		return "topic", false
	}
}

// checkTarget refuses (ErrTargetRefused) a target a replay must never write into, as the topic
// ledger (holders) knows the topics the operator manages: a topic the action names (no Pipeline)
// only when its name is not a record of decisions' or a tier's and no queue or pipeline holds it
// but as a source topic; a pipeline's tier only when the ledger records it for that pipeline, as
// a retry topic, and for no other resource. Any other error is the ledger's.
func checkTarget(ctx context.Context, holders TopicHolders, t Target) error {
	refuse := func(why string) error {
		return fmt.Errorf("%w: topic %q %s: a replay never writes into a dead-letter topic, a record of decisions or another pipeline's retry topic; nothing was written",
			ErrTargetRefused, cutString(t.Topic, 249), why)
	}
	if !headers.ValidTopicName(t.Topic) {
		return refuse("is no valid topic name")
	}
	if t.Pipeline == "" {
		if err := CheckTopicTarget(t.Topic); err != nil {
			return refuse(err.Error())
		}
	} else if strings.HasSuffix(t.Topic, StateTopicSuffix) {
		return refuse("is named like a queue's record of decisions")
	}
	hs, err := holders(ctx, t.Topic)
	if err != nil {
		return fmt.Errorf("check replay target %q in the topic ledger: %w", cutString(t.Topic, 249), err)
	}
	own := false
	for _, h := range hs {
		role, allowed := TopicRole(h, t.Topic)
		switch {
		case t.Pipeline == "" && allowed:
		case t.Pipeline != "" && h.Kind == "ConsumerPipeline" && h.Namespace+"/"+h.Name == t.Pipeline && role == "retry topic":
			own = true
		default:
			return refuse(fmt.Sprintf("is the %s of %s", role, h))
		}
	}
	if t.Pipeline != "" && !own {
		return refuse(fmt.Sprintf("is not a retry topic the topic ledger records for pipeline %s", cutString(t.Pipeline, 317)))
	}
	return nil
}

// checkedTarget checks t once per run (checkTarget), remembering the answer for its topic and
// pipeline.
func (r *run) checkedTarget(ctx context.Context, t Target) error {
	key := t.Pipeline + "\x00" + t.Topic
	if err, ok := r.checked[key]; ok {
		return err
	}
	err := checkTarget(ctx, r.o.Holders, t)
	if err == nil || errors.Is(err, ErrTargetRefused) {
		if r.checked == nil {
			r.checked = map[string]error{}
		}
		r.checked[key] = err
	}
	return err
}
