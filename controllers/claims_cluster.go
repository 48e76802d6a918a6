package controllers

import (
	"cmp"
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// Claims among resources. A consumer group, a retry tier base or a topic is claimed on a Kafka
// cluster, which is what Kafka says it is (its cluster ID), however a spec spells its servers: the
// claim indexes (setupIndexes) list every resource claiming a name on any cluster, and a check keeps
// those on the checking resource's cluster (kafkaspec.Clusters.Same: the same servers at once,
// otherwise the clients' cluster IDs, one Metadata request per connection, remembered).
//
// Two rules decide who holds a claim besides age:
//   - A claim the manager's claim policy refuses holds nothing (claimRefusal): its resource runs no
//     consumers and makes no topic, so it never keeps a name from the resource the policy gives
//     it to. It is computed from the spec, never from a status that could lag a policy change.
//   - A resource's cluster is the ID read now through its connection, else the one its status last
//     recorded (status.kafkaClusterID), so that an outage alone, a manager's restart during one
//     included, never moves a claim. A resource whose cluster was never identified (its connection
//     never resolved or its brokers never answered) has reached no cluster and runs nothing on
//     any: its claims hold nothing against an identified resource, and it waits behind the older
//     claimants, identified or not, rather than run on what may be their cluster.

// readClusterID notes the cluster ID of a client that has just reached Kafka (its Metadata answers
// carry it: no request of its own, but for a client whose answers came from a cache).
func (k *kafkaClient) readClusterID(ctx context.Context) {
	if k.admin == nil || k.clusterID != "" {
		return
	}
	if id, err := k.admin.ClusterID(ctx); err == nil {
		k.clusterID = id
	}
}

// claimClusters is how the reconcilers compare clusters.
func (r *topicReconciler) claimClusters() kafkaspec.Clusters {
	return kafkaspec.Clusters{Reader: r.Client, Defaults: r.Kafka.Defaults, Registry: r.Kafka.Connections}
}

// pipelineParty is p's connection, for kafkaspec.Clusters.Same.
func pipelineParty(p *retryv1alpha1.ConsumerPipeline) *kafkaspec.Party {
	return &kafkaspec.Party{Owner: pipelineOwner(client.ObjectKeyFromObject(p)), Namespace: p.Namespace, Kafka: p.Spec.Kafka, Known: p.Status.KafkaClusterID}
}

// selfParty is the reconciled pipeline's connection conn, for kafkaspec.Clusters.Same: it connects
// on first need, and the cluster ID it reads is conn's.
func (r *ConsumerPipelineReconciler) selfParty(p *retryv1alpha1.ConsumerPipeline, conn *pipelineConnection) *kafkaspec.Party {
	self := pipelineParty(p)
	self.OnRead = func(id string) { conn.clusterID = id }
	self.Connect = func(ctx context.Context) (kafka.Admin, error) {
		k, err := conn.get(ctx)
		if err != nil {
			return nil, err
		}
		return k.admin, nil
	}
	return self
}

// pipelineConnection is a pipeline's Kafka connection for one reconcile, made on first need: by the
// claims phase when it compares clusters, else by the topics phase. Its clusterID is the cluster ID
// read through it, for status.kafkaClusterID.
type pipelineConnection struct {
	kafkaClient
	connect func(context.Context, *kafkaClient) error
}

// get returns the connection, connecting when it is not yet.
func (c *pipelineConnection) get(ctx context.Context) (*kafkaClient, error) {
	if c.admin == nil {
		if err := c.connect(ctx, &c.kafkaClient); err != nil {
			return nil, err
		}
	}
	return &c.kafkaClient, nil
}

// pipelineConnection is p's connection, not made yet.
func (r *ConsumerPipelineReconciler) pipelineConnection(p *retryv1alpha1.ConsumerPipeline) *pipelineConnection {
	return &pipelineConnection{connect: func(ctx context.Context, k *kafkaClient) error {
		return r.connect(ctx, k, pipelineOwner(client.ObjectKeyFromObject(p)), p.Namespace, p.Spec.Kafka)
	}}
}

// pipelineClaimRefusal is why the claim policy refuses what p claims when it runs (its connection,
// the source it reads, the consumer group it joins): its consumers are stopped, it holds nothing.
// Nil when it is allowed.
func (r *topicReconciler) pipelineClaimRefusal(p *retryv1alpha1.ConsumerPipeline) error {
	d := r.Kafka.Defaults
	if err := d.CheckConnection(p.Spec.Kafka); err != nil {
		return err
	}
	if err := d.CheckSourceClaim(p.Namespace, string(p.Spec.Source.Topic)); err != nil {
		return err
	}
	return d.CheckGroupClaim(p.Namespace, consumerGroup(p))
}

// queueClaimRefusal is why the claim policy refuses q its topic (or its connection); nil when it is
// allowed.
func (r *topicReconciler) queueClaimRefusal(q *retryv1alpha1.DeadLetterQueue) error {
	if err := r.Kafka.Defaults.CheckConnection(q.Spec.Kafka); err != nil {
		return err
	}
	if p := r.claimProblem(q, string(q.Spec.Topic.Name)); p != nil {
		return p
	}
	return nil
}

// sharingRivals returns, of the pipelines claiming a name self claims (list from a claim index),
// those that may hold it against self: on self's cluster (or compared while self's cluster was never
// identified: unknown lists them), whose claim the policy allows, created no later than self's
// second (a newer one never wins, sharingOwner). They are compared oldest first, and once one is found, only those of its
// second (which tie with it) are: a check costs Kafka nothing when no older pipeline on other
// servers claims the name, and at most one unreachable rival's timeout otherwise.
func (r *ConsumerPipelineReconciler) sharingRivals(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, self *kafkaspec.Party, list []retryv1alpha1.ConsumerPipeline) (rivals []retryv1alpha1.ConsumerPipeline, unknown map[types.UID]bool) {
	list = slices.Clone(list)
	slices.SortStableFunc(list, func(a, b retryv1alpha1.ConsumerPipeline) int {
		return cmp.Compare(a.CreationTimestamp.Unix(), b.CreationTimestamp.Unix())
	})
	found := int64(-1)
	for i := range list {
		o := &list[i]
		second := o.CreationTimestamp.Unix()
		if second > p.CreationTimestamp.Unix() || (found >= 0 && second > found) {
			break
		}
		if o.UID == p.UID || r.pipelineClaimRefusal(o) != nil {
			continue
		}
		same, err := r.claimClusters().Same(ctx, self, pipelineParty(o))
		if err != nil {
			unknown = noteUnknownCluster(ctx, unknown, same, o.UID, client.ObjectKeyFromObject(o), err)
		}
		if same {
			rivals = append(rivals, *o)
			if found < 0 && second < p.CreationTimestamp.Unix() {
				found = second
			}
		}
	}
	return rivals, unknown
}

// noteUnknownCluster logs a comparison with the claimant key that Clusters.Same could not make by
// cluster IDs read now or recorded (err): when same, this resource's cluster was never identified
// and the claimant is added to unknown (this one waits behind it); otherwise the claimant's was, and
// it holds nothing. The error stays in the log: it may be about another resource (its Secrets, its
// servers), not for this one's status.
func noteUnknownCluster(ctx context.Context, unknown map[types.UID]bool, same bool, uid types.UID, key client.ObjectKey, err error) map[types.UID]bool {
	log := ctrl.LoggerFrom(ctx)
	if !same {
		log.Info("A claimant's cluster was never identified; it holds nothing here", "claimant", key.String(), "error", err.Error())
		return unknown
	}
	log.Info("A cluster was never identified; this resource waits behind an older claimant", "claimant", key.String(), "error", err.Error())
	if unknown == nil {
		unknown = map[types.UID]bool{}
	}
	unknown[uid] = true
	return unknown
}

// unknownClusterNote is what a conflict's message adds when this resource's cluster was never
// identified.
func unknownClusterNote(unknown map[types.UID]bool, winner types.UID) string {
	if !unknown[winner] {
		return ""
	}
	return " (a cluster was never identified, this one's or, in this namespace, that one's: its Kafka connection does not resolve or its brokers have not answered; this one waits until they do, or until that one is changed or deleted)"
}

// queuesClaiming returns the queues claiming topic name on the pipeline's cluster (or any but those
// never identified while the pipeline's cluster was) whose claim the policy allows: a pipeline
// leaves their topics alone.
func (r *ConsumerPipelineReconciler) queuesClaiming(ctx context.Context, self *kafkaspec.Party, name string) ([]retryv1alpha1.DeadLetterQueue, error) {
	list := &retryv1alpha1.DeadLetterQueueList{}
	if err := r.List(ctx, list, client.MatchingFields{indexDLQByClaim: name}); err != nil {
		return nil, err
	}
	var out []retryv1alpha1.DeadLetterQueue
	for i := range list.Items {
		q := &list.Items[i]
		if r.queueClaimRefusal(q) != nil {
			continue
		}
		same, err := r.claimClusters().Same(ctx, self, queueParty(q))
		if err != nil {
			noteUnknownCluster(ctx, nil, same, q.UID, client.ObjectKeyFromObject(q), err)
		}
		if same {
			out = append(out, *q)
		}
	}
	return out, nil
}

// queueParty is q's connection, for kafkaspec.Clusters.Same.
func queueParty(q *retryv1alpha1.DeadLetterQueue) *kafkaspec.Party {
	return &kafkaspec.Party{Owner: dlqOwner(client.ObjectKeyFromObject(q)), Namespace: q.Namespace, Kafka: q.Spec.Kafka, Known: q.Status.KafkaClusterID}
}

// topicOwner returns the queue that manages dlq's topic: the oldest of the queues claiming it on its
// cluster whose claim the policy allows (dlq's own included, whatever the policy says of it: the
// caller refuses it later); unknown is set when that is an older queue compared while dlq's own
// cluster was never identified. k is dlq's connection, made on first need; the cluster ID read
// through it is k's.
func (r *DeadLetterQueueReconciler) topicOwner(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, k *kafkaClient) (owner kafkaspec.Claimant, unknown bool, err error) {
	list := &retryv1alpha1.DeadLetterQueueList{}
	if err := r.List(ctx, list, client.MatchingFields{indexDLQByClaim: string(dlq.Spec.Topic.Name)}); err != nil {
		return kafkaspec.Claimant{}, false, err
	}
	self := queueParty(dlq)
	self.Admin = k.admin
	self.OnRead = func(id string) { k.clusterID = id }
	self.Connect = func(ctx context.Context) (kafka.Admin, error) {
		if k.admin == nil {
			if err := r.connectQueue(ctx, dlq, k); err != nil {
				return nil, err
			}
		}
		return k.admin, nil
	}
	me := kafkaspec.ClaimantOf("DeadLetterQueue", dlq)
	var older []*retryv1alpha1.DeadLetterQueue
	for i := range list.Items {
		if o := &list.Items[i]; o.UID != dlq.UID && kafkaspec.ClaimantOf("DeadLetterQueue", o).OlderThan(me) {
			older = append(older, o)
		}
	}
	// Oldest first: the first on the cluster is the owner, and no later one is asked about.
	slices.SortFunc(older, func(a, b *retryv1alpha1.DeadLetterQueue) int {
		ca, cb := kafkaspec.ClaimantOf("DeadLetterQueue", a), kafkaspec.ClaimantOf("DeadLetterQueue", b)
		switch {
		case ca.OlderThan(cb):
			return -1
		case cb.OlderThan(ca):
			return 1
		}
		return 0
	})
	for _, o := range older {
		if r.queueClaimRefusal(o) != nil {
			continue
		}
		same, err := r.claimClusters().Same(ctx, self, queueParty(o))
		if err != nil {
			noteUnknownCluster(ctx, nil, same, o.UID, client.ObjectKeyFromObject(o), err)
		}
		if same {
			return kafkaspec.ClaimantOf("DeadLetterQueue", o), err != nil, nil
		}
	}
	return me, false, nil
}
