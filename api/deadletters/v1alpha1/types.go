package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Field selectors and query parameters bounding a list by dead-lettering time (RFC 3339): the field
// selector "since=<time>" or "until=<time>" or the query parameters of the same name; since is
// inclusive, until exclusive.
const (
	FieldSince = "since"
	FieldUntil = "until"
)

// Field selectors matching a field whole and exactly, as a DeadLetterAction's selector does (labels
// are sanitised and cut, so two values may share a label value): "queue=<name>", "reason=<reason>",
// "errorType=<type>", "pipeline=<namespace>/<name>", with = (or ==) and !=. A dead letter has one
// value of each, so several = of one field select any of them ("reason=a,reason=b": either);
// several != select none of them. Values are escaped as k8s.io/apimachinery/pkg/fields escapes them.
const (
	FieldQueue     = "queue"
	FieldReason    = "reason"
	FieldErrorType = "errorType"
	FieldPipeline  = "pipeline"
)

// Bounds of one list response (a page): at most MaxListItems dead letters (a larger limit, or none,
// is MaxListItems) and about MaxListBytes of keys, values, headers and messages (a page stops after
// the dead letter that reaches it). A list that reads for a while (10 seconds, or half of what is
// left of the request's deadline) without filling its page returns what it found, maybe nothing,
// with a continue token, so that a selective list of a huge queue goes on page by page. Follow
// metadata.continue for the rest.
const (
	MaxListItems = 500
	MaxListBytes = 4 << 20
)

// MaxListPayloadBytes bounds a key, a value, a header's name and a header's value in a list: a longer
// one is cut (Payload.Truncated, Header.Truncated) and whole on get.
const MaxListPayloadBytes = 64 << 10

// State is the state of a dead letter in the record of decisions.
type State string

// The states of a dead letter.
const (
	// StatePending is the state of a dead letter nobody acted on.
	StatePending State = "Pending"
	// StateReplayed is the state of a dead letter replayed (its produce acknowledged).
	StateReplayed State = "Replayed"
	// StateResolved is the state of a dead letter marked handled.
	StateResolved State = "Resolved"
	// StateIgnored is the state of a dead letter marked not worth handling.
	StateIgnored State = "Ignored"
)

// Encoding says how a Payload's or Header's data is written.
type Encoding string

// The encodings of data.
const (
	// EncodingText is data that is valid UTF-8, as is.
	EncodingText Encoding = "text"
	// EncodingBase64 is any other data, in standard base64 with padding.
	EncodingBase64 Encoding = "base64"
)

// DeadLetter is one record of a DeadLetterQueue's topic, read-only, with the context the
// dispatcher wrote in its headers and its state from the record of decisions. Its name is
// "<queue>.<partition>.<offset>"; its creationTimestamp is when it was dead-lettered (the record's
// Kafka timestamp). Change a dead letter's state with a DeadLetterAction (retry.retryops.dev).
//
// +kubebuilder:object:root=true
type DeadLetter struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata: name, namespace (the queue's), creationTimestamp and the
	// labels of this package (queue, pipeline, reason, error-type, state).
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// queue is the name of the DeadLetterQueue, in the same namespace.
	// +required
	Queue string `json:"queue"`
	// topic is the dead letter topic the record is in.
	// +required
	Topic string `json:"topic"`
	// partition is the record's partition in topic.
	// +required
	Partition int32 `json:"partition"`
	// offset is the record's offset in its partition.
	// +required
	Offset int64 `json:"offset"`
	// pipeline is "<namespace>/<name>" of the ConsumerPipeline that dead-lettered it (empty when
	// the record does not say).
	// +optional
	Pipeline string `json:"pipeline,omitempty"`
	// consumerGroup is the Kafka consumer group of that pipeline.
	// +optional
	ConsumerGroup string `json:"consumerGroup,omitempty"`
	// reason is why it was dead-lettered (max_retries_exceeded, non_retryable, deadline_exceeded,
	// ...).
	// +optional
	Reason string `json:"reason,omitempty"`
	// errorType is the type of the last failure (an HTTP status class, a timeout, ...).
	// +optional
	ErrorType string `json:"errorType,omitempty"`
	// errorMessage is the last failure's message, as the dispatcher wrote it (bounded).
	// +optional
	ErrorMessage string `json:"errorMessage,omitempty"`
	// httpStatus is the HTTP status of the last delivery, 0 when there was none.
	// +optional
	HTTPStatus int32 `json:"httpStatus,omitempty"`
	// attempts is the number of deliveries made.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// firstFailureTime is when the first delivery failed.
	// +optional
	FirstFailureTime *metav1.Time `json:"firstFailureTime,omitempty"`
	// lastFailureTime is when the last delivery failed.
	// +optional
	LastFailureTime *metav1.Time `json:"lastFailureTime,omitempty"`
	// original is where the record was first consumed from; absent when its headers do not say.
	// +optional
	Original *Original `json:"original,omitempty"`
	// replayOf names the dead letter ("<topic>/<partition>/<offset>") whose replay this record is,
	// when it failed again after a replay.
	// +optional
	ReplayOf string `json:"replayOf,omitempty"`
	// replayCount is how many times the record had been replayed before it came back.
	// +optional
	ReplayCount int32 `json:"replayCount,omitempty"`
	// key is the record's key; absent when it has none.
	// +optional
	Key *Payload `json:"key,omitempty"`
	// value is the record's value; absent when it has none. In a list, a value above 64 KiB is cut
	// (value.truncated); a get returns it whole.
	// +optional
	Value *Payload `json:"value,omitempty"`
	// headers are all the record's headers, in order (the retryops.* context headers included).
	// +optional
	// +listType=atomic
	Headers []Header `json:"headers,omitempty"`
	// state is the dead letter's state in the record of decisions.
	// +required
	State DeadLetterStatus `json:"state"`
}

// Original is where a dead-lettered record was first consumed from.
type Original struct {
	// topic is the source topic.
	// +required
	Topic string `json:"topic"`
	// partition is the partition in the source topic.
	// +required
	Partition int32 `json:"partition"`
	// offset is the offset in that partition.
	// +required
	Offset int64 `json:"offset"`
	// time is the source record's Kafka timestamp.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
}

// Payload is a record's key or value.
type Payload struct {
	// encoding is text when data is valid UTF-8 (as is), base64 otherwise.
	// +required
	Encoding Encoding `json:"encoding"`
	// data is the bytes, in encoding; cut in a list when above 64 KiB (truncated says so).
	// +optional
	Data string `json:"data,omitempty"`
	// size is the length of the whole key or value in bytes.
	// +required
	Size int64 `json:"size"`
	// truncated is true when data holds only the first 64 KiB (in a list; get the dead letter for
	// all of it).
	// +optional
	Truncated bool `json:"truncated,omitempty"`
}

// Header is one header of a record.
type Header struct {
	// name is the header's key.
	// +required
	Name string `json:"name"`
	// value is the header's value, in encoding.
	// +optional
	Value string `json:"value,omitempty"`
	// encoding is text when the value is valid UTF-8, base64 otherwise.
	// +required
	Encoding Encoding `json:"encoding"`
	// size is the length of the whole value in bytes, when truncated.
	// +optional
	Size int64 `json:"size,omitempty"`
	// truncated is true when, in a list, the name or the value was longer than 64 KiB and holds
	// only its first 64 KiB (get the dead letter for all of it).
	// +optional
	Truncated bool `json:"truncated,omitempty"`
}

// DeadLetterStatus is the latest decision on a dead letter, from the record of decisions (the
// queue's compacted "<topic>.state" topic).
type DeadLetterStatus struct {
	// state is Pending (no decision), Replayed, Resolved or Ignored.
	// +required
	State State `json:"state"`
	// note says why (Resolve and Ignore).
	// +optional
	Note string `json:"note,omitempty"`
	// requestedBy is the user who asked for the decision.
	// +optional
	RequestedBy string `json:"requestedBy,omitempty"`
	// action is the DeadLetterAction that decided.
	// +optional
	Action *ActionRef `json:"action,omitempty"`
	// time is when the decision was recorded.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
}

// ActionRef names a DeadLetterAction.
type ActionRef struct {
	// namespace is the action's namespace.
	// +required
	Namespace string `json:"namespace"`
	// name is the action's name.
	// +required
	Name string `json:"name"`
	// uid is the action's UID.
	// +optional
	UID string `json:"uid,omitempty"`
}

// DeadLetterList is a page of dead letters. Its metadata.continue, when set, resumes the list
// after the last one (an opaque token holding the position in every partition).
//
// +kubebuilder:object:root=true
type DeadLetterList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata: continue, and remainingItemCount when known.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the dead letters of this page, ordered by partition then offset of the position
	// they were read at.
	// +required
	Items []DeadLetter `json:"items"`
}
