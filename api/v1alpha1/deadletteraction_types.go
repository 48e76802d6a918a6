package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeadLetterActionType is the operation a DeadLetterAction performs on the dead letters it selects.
// +kubebuilder:validation:Enum=Replay;Resolve;Ignore;Purge
type DeadLetterActionType string

// The dead-letter actions.
const (
	// DeadLetterReplay produces each selected dead letter's original record again, to a path only its
	// pipeline's consumer group reads, and records it as Replayed.
	DeadLetterReplay DeadLetterActionType = "Replay"
	// DeadLetterResolve records the selected dead letters as Resolved (handled), with a note.
	DeadLetterResolve DeadLetterActionType = "Resolve"
	// DeadLetterIgnore records the selected dead letters as Ignored (not worth handling), with a note.
	DeadLetterIgnore DeadLetterActionType = "Ignore"
	// DeadLetterPurge deletes, per partition, the longest prefix of dead letters that all match.
	DeadLetterPurge DeadLetterActionType = "Purge"
)

// DeadLetterState is the state of one dead letter in the record of decisions.
// +kubebuilder:validation:Enum=Pending;Replayed;Resolved;Ignored
type DeadLetterState string

// The dead-letter states.
const (
	// DeadLetterPending is the state of a dead letter nobody acted on (it has no entry in the record).
	DeadLetterPending DeadLetterState = "Pending"
	// DeadLetterReplayed is the state of a dead letter replayed (its produce acknowledged).
	DeadLetterReplayed DeadLetterState = "Replayed"
	// DeadLetterResolved is the state of a dead letter marked handled.
	DeadLetterResolved DeadLetterState = "Resolved"
	// DeadLetterIgnored is the state of a dead letter marked not worth handling.
	DeadLetterIgnored DeadLetterState = "Ignored"
)

// DeadLetterActionMode says whether an action changes anything.
// +kubebuilder:validation:Enum=Run;DryRun
type DeadLetterActionMode string

// The action modes.
const (
	// ActionModeRun performs the action.
	ActionModeRun DeadLetterActionMode = "Run"
	// ActionModeDryRun counts and lists what the action would do and changes nothing: no produce, no
	// state written, no record deleted.
	ActionModeDryRun DeadLetterActionMode = "DryRun"
)

// DeadLetterActionPhase is where a DeadLetterAction is in its single run.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type DeadLetterActionPhase string

// The action phases.
const (
	// ActionPending: not started (waiting for its queue, or for another action on the same queue).
	ActionPending DeadLetterActionPhase = "Pending"
	// ActionRunning: started; status.checkpoint says how far it got.
	ActionRunning DeadLetterActionPhase = "Running"
	// ActionSucceeded: every record of the snapshot was considered.
	ActionSucceeded DeadLetterActionPhase = "Succeeded"
	// ActionFailed: the action stopped and will not run again (see the conditions).
	ActionFailed DeadLetterActionPhase = "Failed"
)

// Condition types of a DeadLetterAction (Ready, ConditionReady, summarises them, kstatus-style).
const (
	// ConditionComplete is True once the action has finished (Succeeded or Failed), False while it is
	// pending or running.
	ConditionComplete = "Complete"
)

// Bounds of a DeadLetterAction, shared with the engine (internal/deadletters).
const (
	// MaxSelectorRecords bounds spec.selector.records.
	MaxSelectorRecords = 1000
	// MaxSelectorKeys bounds spec.selector.keys.
	MaxSelectorKeys = 100
	// MaxListedRecords bounds status.matchedRecords and status.blockingRecords.
	MaxListedRecords = 100
	// MaxActionPartitions bounds status.snapshot and status.checkpoint (a DLQ has at most 10000
	// partitions).
	MaxActionPartitions = 10000
	// DefaultRecordsPerSecond is the replay rate when spec.rate is absent.
	DefaultRecordsPerSecond = 100
	// DefaultMaxReplays is spec.maxReplays' default.
	DefaultMaxReplays = 3
)

// DeadLetterActionSpec is one operation on the dead letters of one DeadLetterQueue. It is immutable:
// to change what is done, create another action.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="the spec of a DeadLetterAction is immutable: create another action"
// +kubebuilder:validation:XValidation:rule="!(self.action in ['Resolve', 'Ignore']) || (has(self.note) && size(self.note) > 0)",message="note is required for Resolve and Ignore: say why"
// +kubebuilder:validation:XValidation:rule="self.action == 'Replay' || (!has(self.target) && !has(self.rate))",message="target and rate apply to Replay only"
// +kubebuilder:validation:XValidation:rule="self.action != 'Purge' || (has(self.selector) && has(self.selector.before))",message="Purge needs selector.before: only dead letters older than it are deleted"
// +kubebuilder:validation:XValidation:rule="self.action != 'Purge' || !has(self.selector) || !has(self.selector.states) || !self.selector.states.exists(s, s == 'Pending')",message="Purge never deletes Pending dead letters: select Resolved, Ignored or Replayed"
type DeadLetterActionSpec struct {
	// queue is the name of the DeadLetterQueue, in the action's namespace, whose dead letters the
	// action operates on.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Queue string `json:"queue"`

	// action is what is done to each selected dead letter: Replay (produce its original record again
	// and mark it Replayed), Resolve or Ignore (record the decision with the note), or Purge (delete,
	// per partition, the longest prefix of dead letters that all match).
	// +required
	Action DeadLetterActionType `json:"action"`

	// selector chooses the dead letters; every criterion given must hold. Absent selects every dead
	// letter in the default states: Pending for Replay, Resolve and Ignore; Resolved, Ignored and
	// Replayed for Purge (which also needs selector.before).
	// +optional
	Selector *DeadLetterSelector `json:"selector,omitempty"`

	// note says why; required for Resolve and Ignore, and kept in the record of decisions.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Note string `json:"note,omitempty"`

	// requestedBy is the user who asks for the action, kept in the record of decisions. The
	// admission policy shipped in config/ requires it to be the user creating the action.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	RequestedBy string `json:"requestedBy"`

	// target is where Replay produces (Replay only). Absent means each dead letter's own pipeline (its
	// retryops.pipeline header) through its first retry tier, which only that pipeline's consumer group
	// reads, with the record due at once; never the shared source topic.
	// +optional
	Target *ReplayTarget `json:"target,omitempty"`

	// rate bounds how fast Replay produces (Replay only). Absent means 100 records per second.
	// +optional
	Rate *ReplayRate `json:"rate,omitempty"`

	// maxRecords stops the action after this many dead letters were acted on (replayed, recorded or,
	// for Purge, deleted). Absent means no limit.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxRecords *int64 `json:"maxRecords,omitempty"`

	// maxReplays is how many times one dead letter's record may be replayed (Replay only); a dead letter
	// replayed that many times already is skipped and counted. Defaults to 3.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxReplays int32 `json:"maxReplays,omitempty"`

	// mode is Run (the default) to perform the action, or DryRun to count and list what it would do
	// and change nothing (no produce, no state written, no record deleted).
	// +kubebuilder:default=Run
	// +optional
	Mode DeadLetterActionMode `json:"mode,omitempty"`
}

// DeadLetterSelector chooses dead letters. Every criterion given must hold; within a list, any item
// may match.
// +kubebuilder:validation:XValidation:rule="!has(self.after) || !has(self.before) || timestamp(self.after) < timestamp(self.before)",message="selector.after must be before selector.before"
type DeadLetterSelector struct {
	// reasons selects dead letters by their reason (retryops.reason): non_retriable_error,
	// max_retries_exceeded, deadline_exceeded, undeliverable, malformed.
	// +kubebuilder:validation:MaxItems=8
	// +listType=set
	// +optional
	Reasons []DeadLetterName `json:"reasons,omitempty"`

	// errorTypes selects dead letters by the error type of their last failure (retryops.error.type).
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	ErrorTypes []DeadLetterName `json:"errorTypes,omitempty"`

	// pipelines selects dead letters by the pipeline that dead-lettered them, "<namespace>/<name>"
	// (retryops.pipeline).
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	Pipelines []DeadLetterName `json:"pipelines,omitempty"`

	// states selects dead letters by their state in the record of decisions. Absent means Pending for
	// Replay, Resolve and Ignore; Resolved, Ignored and Replayed for Purge.
	// +kubebuilder:validation:MaxItems=4
	// +listType=set
	// +optional
	States []DeadLetterState `json:"states,omitempty"`

	// after selects dead letters dead-lettered at or after this time (their record timestamp).
	// +optional
	After *metav1.Time `json:"after,omitempty"`

	// before selects dead letters dead-lettered before this time (their record timestamp).
	// +optional
	Before *metav1.Time `json:"before,omitempty"`

	// keys selects dead letters whose record key is exactly one of these (as UTF-8 text).
	// +kubebuilder:validation:MaxItems=100
	// +listType=set
	// +optional
	Keys []RecordKey `json:"keys,omitempty"`

	// headers selects dead letters that carry every one of these headers with exactly this value.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Headers []HeaderMatch `json:"headers,omitempty"`

	// records selects explicit dead letters, as "<partition>/<offset>" of the dead letter topic.
	// +kubebuilder:validation:MaxItems=1000
	// +listType=set
	// +optional
	Records []RecordRef `json:"records,omitempty"`
}

// DeadLetterName is a reason, an error type or a pipeline ("<namespace>/<name>") as the dead-letter
// headers carry it.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=317
type DeadLetterName string

// RecordKey is a record key, as UTF-8 text.
// +kubebuilder:validation:MaxLength=1024
type RecordKey string

// RecordRef names one record of a topic as "<partition>/<offset>".
// +kubebuilder:validation:MinLength=3
// +kubebuilder:validation:MaxLength=30
// +kubebuilder:validation:Pattern=`^(0|[1-9][0-9]{0,9})/(0|[1-9][0-9]{0,18})$`
type RecordRef string

// HeaderMatch is one header a dead letter must carry with exactly this value.
type HeaderMatch struct {
	// name of the header.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +required
	Name string `json:"name"`

	// value the header must have, compared as bytes with its UTF-8 encoding.
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Value string `json:"value"`
}

// ReplayTarget is where Replay produces: exactly one of pipeline or topic.
// +kubebuilder:validation:XValidation:rule="has(self.pipeline) != has(self.topic)",message="set exactly one of target.pipeline and target.topic"
// +kubebuilder:validation:XValidation:rule="!has(self.topic) || !self.topic.endsWith('.state')",message="target.topic may not be a queue's record of decisions (a name ending in .state), which only the operator writes"
// +kubebuilder:validation:XValidation:rule="!has(self.topic) || !self.topic.matches('[.]retry[.][0-9][0-9a-zA-Z.]*(-[0-9]+)?$')",message="target.topic may not be a pipeline's retry topic (<source>.retry.<n> or <source>.retry.<delay>): set target.pipeline to replay through a pipeline's first retry topic"
type ReplayTarget struct {
	// pipeline is the name of a ConsumerPipeline in the action's namespace; replayed records go to its
	// first retry tier, due at once, so only its consumer group receives them.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Pipeline string `json:"pipeline,omitempty"`

	// topic is a Kafka topic to produce to, as asked explicitly, on the queue's cluster: a source
	// topic, or a topic the operator does not manage. Beware: every consumer group of that topic
	// receives the replayed records. Never a topic the operator manages as a dead-letter queue (this
	// queue's or another's), a record of decisions (<queue topic>.state) or a retry tier: the API
	// server refuses those names, and the operator fails the action, writing nothing, when the topic
	// ledger records the topic as such.
	// +optional
	Topic TopicName `json:"topic,omitempty"`
}

// ReplayRate bounds how fast records are replayed.
type ReplayRate struct {
	// recordsPerSecond is the highest replay rate. Defaults to 100.
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	RecordsPerSecond int32 `json:"recordsPerSecond,omitempty"`
}

// PartitionOffset is an offset of one partition of the queue's topic.
type PartitionOffset struct {
	// partition number.
	// +kubebuilder:validation:Minimum=0
	// +required
	Partition int32 `json:"partition"`

	// offset in the partition.
	// +kubebuilder:validation:Minimum=0
	// +required
	Offset int64 `json:"offset"`
}

// DeadLetterActionStatus is the progress of an action.
type DeadLetterActionStatus struct {
	// conditions are Ready (kstatus: True once the action succeeded, False with the reason while it
	// waits, runs or failed) and Complete (True once it finished, either way).
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is Pending (not started), Running, Succeeded or Failed. The conditions say why.
	// +optional
	Phase DeadLetterActionPhase `json:"phase,omitempty"` //nolint:kubeapilinter // a phase for kubectl get beside progress; the conditions (Ready, Complete) carry the reasons

	// progress is "<done>/<matched>", for kubectl get.
	// +kubebuilder:validation:MaxLength=41
	// +optional
	Progress string `json:"progress,omitempty"`

	// matched is how many dead letters of the snapshot matched the selector so far.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Matched int64 `json:"matched,omitempty"`

	// done is how many matched dead letters were acted on (replayed, recorded or deleted); in DryRun,
	// how many would be.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Done int64 `json:"done,omitempty"`

	// skipped is how many matched dead letters were left alone; skippedReasons says why.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Skipped int64 `json:"skipped,omitempty"`

	// skippedReasons counts the skipped dead letters by reason (ReplayLimit, NoTarget, Blocked, ...).
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	SkippedReasons []NamedCount `json:"skippedReasons,omitempty"`

	// failed is how many matched dead letters could not be acted on (a produce or a state write failed).
	// +kubebuilder:validation:Minimum=0
	// +optional
	Failed int64 `json:"failed,omitempty"`

	// duplicates is how many records may have been produced twice by a Replay: those in flight when the
	// manager stopped, produced again on resume.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Duplicates int64 `json:"duplicates,omitempty"`

	// startTime is when the action started running.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the action finished.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// snapshot holds the end offsets of the queue's partitions captured when the action started: it
	// covers only the dead letters below them.
	// +kubebuilder:validation:MaxItems=10000
	// +listType=map
	// +listMapKey=partition
	// +optional
	Snapshot []PartitionOffset `json:"snapshot,omitempty"`

	// checkpoint holds, per partition, the offset of the first dead letter not yet considered; a
	// restarted manager resumes from it.
	// +kubebuilder:validation:MaxItems=10000
	// +listType=map
	// +listMapKey=partition
	// +optional
	Checkpoint []PartitionOffset `json:"checkpoint,omitempty"`

	// matchedRecords lists, in DryRun, the first matched dead letters as "<partition>/<offset>".
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	MatchedRecords []RecordRef `json:"matchedRecords,omitempty"`

	// blockingRecords lists, for Purge, the first dead letter of each partition that does not match
	// and so ends the prefix deleted, as "<partition>/<offset>".
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	BlockingRecords []RecordRef `json:"blockingRecords,omitempty"`
}

// DeadLetterAction is one operation (Replay, Resolve, Ignore or Purge) on the dead letters of one
// DeadLetterQueue in the same namespace, run once over the dead letters present when it starts. Its
// decisions are kept in the queue's record of decisions. Deleting it cancels it if it still runs.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dla,categories=retryops
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.action`
// +kubebuilder:printcolumn:name="Queue",type=string,JSONPath=`.spec.queue`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.progress`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DeadLetterAction struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the action asked for. Immutable.
	// +required
	Spec DeadLetterActionSpec `json:"spec"`

	// status is the progress of the action.
	// +optional
	Status DeadLetterActionStatus `json:"status,omitempty"`
}

// DeadLetterActionList is a list of DeadLetterAction.
// +kubebuilder:object:root=true
type DeadLetterActionList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the DeadLetterActions.
	Items []DeadLetterAction `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &DeadLetterAction{}, &DeadLetterActionList{})
}
