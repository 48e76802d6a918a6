package franz

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/kafka"
)

// The batched topic work of kafka.Batching: each method sends one request of each kind it needs for
// all its topics and answers per topic, under the operation (and with the error) the single-topic
// method would report.

var _ kafka.BatchAdmin = (*kadmAdmin)(nil)

// errNoResult is a topic the broker's answer left out.
var errNoResult = errors.New("the broker returned no result for the topic")

// failAs is err as the failure of op: a *kafka.Error (the whole request's, already classified)
// keeps its kind and code under op's name; anything else is classified for c (nil before the call
// began).
func (a *kadmAdmin) failAs(ctx context.Context, c *call, op string, err error) error {
	if e, ok := errors.AsType[*kafka.Error](err); ok {
		return kafka.NewError(op, e.Kind, e.Unwrap(), a.secret).WithCode(e.Code, e.Retriable)
	}
	if c == nil {
		return newError(op, kafka.KindOther, err, a.secret)
	}
	return c.failOp(ctx, op, err)
}

// topicsEach splits a metadata answer into existing topics and the errors of topics the brokers
// refused (authorization, leader not available); missing topics are in neither.
func topicsEach(resp *kmsg.MetadataResponse) (map[string]topicMeta, map[string]error) {
	metas := make(map[string]topicMeta, len(resp.Topics))
	errs := map[string]error{}
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		name := *t.Topic
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if !errors.Is(err, kerr.UnknownTopicOrPartition) {
				errs[name] = fmt.Errorf("topic %q: %w", name, brokerErr(err, ""))
			}
			continue
		}
		metas[name] = metaOf(t)
	}
	return metas, errs
}

// batchCall runs fn as one call for names: begin, bounded by the request timeout, each name failed
// under opOf(name) when the whole call fails. fn answers per name with raw errors; answer turns one
// into the result.
func batchCall[R any](ctx context.Context, a *kadmAdmin, what string, names []string, opOf func(string) string,
	fn func(context.Context, *call) (map[string]error, map[string]R, error), answer func(name string, r R, err error) R) map[string]R {
	out := make(map[string]R, len(names))
	if len(names) == 0 {
		return out
	}
	cctx, c, done, err := a.begin(ctx, what+" "+describeNames(names))
	if err != nil {
		for _, n := range names {
			var zero R
			out[n] = answer(n, zero, a.failAs(ctx, nil, opOf(n), err))
		}
		return out
	}
	defer done()
	type result struct {
		errs map[string]error
		vals map[string]R
	}
	res, err := await(cctx, c, func() (result, error) {
		errs, vals, err := fn(cctx, c)
		return result{errs, vals}, err
	})
	for _, n := range names {
		var zero R
		switch e, failed := res.errs[n]; {
		case err != nil:
			out[n] = answer(n, zero, a.failAs(cctx, c, opOf(n), err))
		case failed:
			out[n] = answer(n, res.vals[n], c.failOp(cctx, opOf(n), e))
		default:
			out[n] = answer(n, res.vals[n], nil)
		}
	}
	return out
}

// errOnly is the answer of the methods that only change.
func errOnly(_ string, _ error, err error) error { return err }

// DescribeTopicsEach implements kafka.BatchAdmin.
func (a *kadmAdmin) DescribeTopicsEach(ctx context.Context, names []string, configs bool) map[string]kafka.TopicResult {
	names = uniqNames(names)
	what := "describe topics"
	if !configs {
		what = "read the IDs of topics"
	}
	opOf := func(n string) string { return what + " " + describeNames([]string{n}) }
	return batchCall(ctx, a, what, names, opOf, func(ctx context.Context, c *call) (map[string]error, map[string]kafka.TopicResult, error) {
		resp, err := a.metadata(ctx, names)
		if err != nil {
			return nil, nil, err
		}
		metas, errs := topicsEach(resp)
		vals := make(map[string]kafka.TopicResult, len(names))
		var existing []string
		for _, n := range names {
			tm, ok := metas[n]
			if !ok {
				vals[n] = kafka.TopicResult{Info: kafka.TopicInfo{Name: n}}
				continue
			}
			info := kafka.TopicInfo{Name: n, ID: tm.id, Exists: true, Partitions: int32(len(tm.partitions)), ReplicationFactor: tm.rf}
			if configs {
				info.Configs = map[string]string{}
				existing = append(existing, n)
			}
			vals[n] = kafka.TopicResult{Info: info}
		}
		if len(existing) == 0 {
			return errs, vals, nil
		}
		// Not kadm's DescribeTopicConfigs: it fails the whole answer on one topic's authorization
		// error, which would fail every batch-mate of a topic its tenant may not read configs of.
		req := kmsg.NewPtrDescribeConfigsRequest()
		for _, n := range existing {
			rr := kmsg.NewDescribeConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, n
			req.Resources = append(req.Resources, rr)
		}
		cresp, err := req.RequestWith(ctx, a.cl)
		if err != nil {
			// Only the topics that exist asked for configs: a missing one is answered from Metadata,
			// as it is alone.
			for _, n := range existing {
				errs[n] = err
			}
			return errs, vals, nil
		}
		for _, rc := range cresp.Resources {
			r, ok := vals[rc.ResourceName]
			if !ok || !r.Info.Exists {
				continue
			}
			if err := kerr.ErrorForCode(rc.ErrorCode); err != nil {
				if errors.Is(err, kerr.UnknownTopicOrPartition) {
					// Deleted between the two requests.
					vals[rc.ResourceName] = kafka.TopicResult{Info: kafka.TopicInfo{Name: rc.ResourceName}}
					continue
				}
				msg := ""
				if rc.ErrorMessage != nil {
					msg = *rc.ErrorMessage
				}
				errs[rc.ResourceName] = fmt.Errorf("describe configs of topic %q: %w", rc.ResourceName, brokerErr(err, msg))
				continue
			}
			for _, cfg := range rc.Configs {
				if cfg.Source == kmsg.ConfigSourceDynamicTopicConfig {
					v := ""
					if cfg.Value != nil {
						v = *cfg.Value
					}
					r.Info.Configs[cfg.Name] = v
				}
			}
		}
		return errs, vals, nil
	}, func(_ string, r kafka.TopicResult, err error) kafka.TopicResult {
		if err != nil {
			return kafka.TopicResult{Err: err}
		}
		return r
	})
}

// CreateTopics implements kafka.BatchAdmin. Of a name given twice, the first is created.
func (a *kadmAdmin) CreateTopics(ctx context.Context, topics []kafka.TopicCreate) map[string]error {
	opOf := func(n string) string { return fmt.Sprintf("create topic %q", n) }
	out := make(map[string]error, len(topics))
	var send []kafka.TopicCreate
	var names []string
	for _, t := range topics {
		if _, seen := out[t.Name]; seen {
			continue
		}
		out[t.Name] = nil
		if err := checkCreate(t.Name, t.Partitions, t.ReplicationFactor); err != nil {
			out[t.Name] = newError(opOf(t.Name), kafka.KindOther, err, "")
			continue
		}
		send = append(send, t)
		names = append(names, t.Name)
	}
	res := batchCall(ctx, a, "create topics", names, opOf, func(ctx context.Context, _ *call) (map[string]error, map[string]error, error) {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = a.timeoutMillis
		for _, t := range send {
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.Name, t.Partitions, t.ReplicationFactor
			for _, k := range slices.Sorted(maps.Keys(t.Configs)) {
				rc := kmsg.NewCreateTopicsRequestTopicConfig()
				rc.Name, rc.Value = k, kmsg.StringPtr(t.Configs[k])
				rt.Configs = append(rt.Configs, rc)
			}
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, a.cl)
		if err != nil {
			return nil, nil, err
		}
		errs := missing(names)
		for _, t := range resp.Topics {
			setAnswer(errs, t.Topic, t.ErrorCode, t.ErrorMessage)
		}
		return errs, nil, nil
	}, errOnly)
	maps.Copy(out, res)
	return out
}

// missing is every name answered errNoResult, until the broker's answer says otherwise.
func missing(names []string) map[string]error {
	errs := make(map[string]error, len(names))
	for _, n := range names {
		errs[n] = errNoResult
	}
	return errs
}

// setAnswer records the broker's answer for name: done (removed) or its error.
func setAnswer(errs map[string]error, name string, code int16, message *string) {
	if _, asked := errs[name]; !asked {
		return
	}
	if err := kerr.ErrorForCode(code); err != nil {
		msg := ""
		if message != nil {
			msg = *message
		}
		errs[name] = brokerErr(err, msg)
		return
	}
	delete(errs, name)
}

// AlterTopicsConfigs implements kafka.BatchAdmin.
func (a *kadmAdmin) AlterTopicsConfigs(ctx context.Context, set map[string]map[string]string) map[string]error {
	opOf := func(n string) string { return fmt.Sprintf("alter configs of topic %q", n) }
	out := make(map[string]error, len(set))
	var names []string
	for _, n := range slices.Sorted(maps.Keys(set)) {
		out[n] = nil
		if err := validateTopicName(n); err != nil {
			out[n] = newError(opOf(n), kafka.KindOther, err, "")
		} else if len(set[n]) > 0 {
			names = append(names, n)
		}
	}
	res := batchCall(ctx, a, "alter configs of topics", names, opOf, func(ctx context.Context, _ *call) (map[string]error, map[string]error, error) {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		for _, n := range names {
			rr := kmsg.NewIncrementalAlterConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, n
			for _, k := range slices.Sorted(maps.Keys(set[n])) {
				rc := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
				rc.Name, rc.Op, rc.Value = k, kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(set[n][k])
				rr.Configs = append(rr.Configs, rc)
			}
			req.Resources = append(req.Resources, rr)
		}
		resp, err := req.RequestWith(ctx, a.cl)
		if err != nil {
			return nil, nil, err
		}
		errs := missing(names)
		for _, r := range resp.Resources {
			setAnswer(errs, r.ResourceName, r.ErrorCode, r.ErrorMessage)
		}
		return errs, nil, nil
	}, errOnly)
	maps.Copy(out, res)
	return out
}

// AddPartitionsEach implements kafka.BatchAdmin.
func (a *kadmAdmin) AddPartitionsEach(ctx context.Context, totals map[string]int32) map[string]error {
	opOf := func(n string) string { return fmt.Sprintf("grow topic %q to %d partitions", n, totals[n]) }
	out := make(map[string]error, len(totals))
	var names []string
	for _, n := range slices.Sorted(maps.Keys(totals)) {
		out[n] = nil
		switch err := validateTopicName(n); {
		case err != nil:
			out[n] = newError(opOf(n), kafka.KindOther, err, "")
		case totals[n] <= 0:
			out[n] = newError(opOf(n), kafka.KindOther, fmt.Errorf("invalid partition count %d", totals[n]), "")
		default:
			names = append(names, n)
		}
	}
	res := batchCall(ctx, a, "grow topics", names, opOf, func(ctx context.Context, _ *call) (map[string]error, map[string]error, error) {
		resp, err := a.metadata(ctx, names)
		if err != nil {
			return nil, nil, err
		}
		metas, errs := topicsEach(resp)
		req := kmsg.NewPtrCreatePartitionsRequest()
		req.TimeoutMillis = a.timeoutMillis
		var grow []string
		for _, n := range names {
			tm, ok := metas[n]
			if _, refused := errs[n]; refused {
				continue
			}
			current := int32(len(tm.partitions))
			switch {
			case !ok:
				errs[n] = kerr.UnknownTopicOrPartition
			case current > totals[n]:
				errs[n] = fmt.Errorf("%w: topic has %d partitions; Kafka cannot reduce the partition count", kerr.InvalidPartitions, current)
			case current < totals[n]:
				rt := kmsg.NewCreatePartitionsRequestTopic()
				rt.Topic, rt.Count = n, totals[n]
				req.Topics = append(req.Topics, rt)
				grow = append(grow, n)
			}
		}
		if len(grow) == 0 {
			return errs, nil, nil
		}
		cresp, err := req.RequestWith(ctx, a.cl)
		if err != nil {
			// Only the topics that needed growing share this failure.
			for _, n := range grow {
				errs[n] = err
			}
			return errs, nil, nil
		}
		answers := missing(grow)
		for _, t := range cresp.Topics {
			setAnswer(answers, t.Topic, t.ErrorCode, t.ErrorMessage)
		}
		maps.Copy(errs, answers)
		return errs, nil, nil
	}, errOnly)
	maps.Copy(out, res)
	return out
}
