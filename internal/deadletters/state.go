package deadletters

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/sdk/headers"
)

// StateTopicSuffix follows the dead letter topic's name in its state topic's.
const StateTopicSuffix = ".state"

// StateTopic is the name of the compacted topic that records the decisions on the dead letters of
// dlqTopic: dlqTopic + ".state". A dead letter topic name longer than 243 characters has no state
// topic (Kafka allows 249); ok is false then.
func StateTopic(dlqTopic string) (name string, ok bool) {
	name = dlqTopic + StateTopicSuffix
	return name, headers.ValidTopicName(name)
}

// StateTopicConfigs are the topic configs of a state topic: compacted, so that it keeps the latest
// decision on every dead letter ever acted on.
func StateTopicConfigs() map[string]string {
	return map[string]string{"cleanup.policy": "compact"}
}

// Bounds of a state record, which anyone who can write to the state topic controls.
const (
	// MaxStateBytes bounds an encoded state; a longer record is invalid.
	MaxStateBytes = 4096
	// MaxNoteBytes bounds State.Note (the API's spec.note).
	MaxNoteBytes = 1024
	// MaxRequestedByBytes bounds State.RequestedBy (the API's spec.requestedBy).
	MaxRequestedByBytes = 253
	// MaxUIDBytes bounds ActionRef.UID.
	MaxUIDBytes = 128
	// MaxTopicIDBytes bounds State.TopicID (a UUID is 36).
	MaxTopicIDBytes = 64
)

// ActionRef names the DeadLetterAction that made a decision.
type ActionRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// State is the latest decision on one dead letter: the value of its record in the state topic. A
// dead letter without one is Pending.
type State struct {
	// State is Replayed, Resolved or Ignored (Pending when there is no record, or after a reset).
	State retryv1alpha1.DeadLetterState `json:"state"`
	// Note says why (Resolve and Ignore).
	Note string `json:"note,omitempty"`
	// RequestedBy is the user who asked.
	RequestedBy string `json:"requestedBy,omitempty"`
	// Action is the DeadLetterAction that decided.
	Action ActionRef `json:"action"`
	// Time is when the decision was recorded.
	Time time.Time `json:"time"`
	// ReplayCount is how many times the dead letter's record has been replayed, by any action.
	ReplayCount int `json:"replayCount,omitempty"`
	// TopicID is the ID of the dead letter topic the decision was made on (kafka.Admin.TopicIDs): a
	// decision belongs to the record at its key's partition and offset of that topic only, never to
	// the record a topic deleted and created again under the same name holds there. It is empty in
	// a decision recorded where the brokers gave no topic IDs (Kafka before 2.8, or brokers that
	// answer an older Metadata version): an unbound decision; see BelongsTo.
	TopicID string `json:"topicID,omitempty"`
}

// BelongsTo reports whether the decision s applies to the dead letter topic whose ID is now
// topicID ("" when the brokers give none): it was made on that topic, or it is an unbound decision
// (no topic ID), which applies to whatever topic holds its offset. Once the brokers give IDs (an
// upgrade of the cluster) the reconciler gives every unbound decision on a record held the
// topic's ID (Survey); it drops them all before it creates a deleted topic again (Unbound), so
// that an unbound decision never outlives the topic it was made on.
func (s State) BelongsTo(topicID string) bool { return s.TopicID == "" || s.TopicID == topicID }

// Pending reports whether s is the state of a dead letter nobody acted on.
func (s State) Pending() bool { return s.State == "" || s.State == retryv1alpha1.DeadLetterPending }

// Name returns the state's name, Pending for the zero State.
func (s State) Name() retryv1alpha1.DeadLetterState {
	if s.State == "" {
		return retryv1alpha1.DeadLetterPending
	}
	return s.State
}

// EncodeState encodes s as the value of its state record, refusing a state out of bounds.
func EncodeState(s State) ([]byte, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	s.Time = s.Time.UTC()
	return json.Marshal(s)
}

// DecodeState decodes a state record's value. A nil value (a tombstone) is the Pending state. A value
// longer than MaxStateBytes, not JSON, with unknown fields, or out of bounds is an error.
func DecodeState(value []byte) (State, error) {
	if value == nil {
		return State{State: retryv1alpha1.DeadLetterPending}, nil
	}
	if len(value) > MaxStateBytes {
		return State{}, fmt.Errorf("state record of %d bytes, more than %d", len(value), MaxStateBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	var s State
	if err := dec.Decode(&s); err != nil {
		return State{}, fmt.Errorf("state record: %w", err)
	}
	if dec.More() {
		return State{}, errors.New("state record: trailing data")
	}
	if err := s.validate(); err != nil {
		return State{}, err
	}
	return s, nil
}

func (s State) validate() error {
	switch s.State {
	case retryv1alpha1.DeadLetterPending, retryv1alpha1.DeadLetterReplayed, retryv1alpha1.DeadLetterResolved, retryv1alpha1.DeadLetterIgnored:
	default:
		return fmt.Errorf("state %q is none of Pending, Replayed, Resolved, Ignored", cutString(string(s.State), 32))
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{
		{"note", s.Note, MaxNoteBytes},
		{"requestedBy", s.RequestedBy, MaxRequestedByBytes},
		{"action.namespace", s.Action.Namespace, 63},
		{"action.name", s.Action.Name, 253},
		{"action.uid", s.Action.UID, MaxUIDBytes},
		{"topicID", s.TopicID, MaxTopicIDBytes},
	} {
		if len(f.v) > f.max || !utf8.ValidString(f.v) {
			return fmt.Errorf("state %s: longer than %d bytes or not UTF-8", f.name, f.max)
		}
	}
	if s.ReplayCount < 0 || s.ReplayCount > headers.MaxReplayCount {
		return fmt.Errorf("state replayCount %d out of 0..%d", s.ReplayCount, headers.MaxReplayCount)
	}
	return nil
}

// States is the record of decisions on one dead letter topic as loaded: the latest valid state of
// every dead letter acted on (tombstoned and Pending ones are absent).
type States struct {
	// ByID maps a dead letter to its latest state.
	ByID map[ID]State
	// Invalid counts the state records that could not be decoded (their key or value); they are
	// ignored, and an earlier valid state of the same key stays.
	Invalid int
	// Foreign counts the decisions read that belong to another incarnation of the topic (another
	// topic ID): they are ignored, and the record's dead letter is Pending unless decided again.
	Foreign int
}

// Get returns the state of id (the zero, Pending, State when it has none).
func (s *States) Get(id ID) State { return s.ByID[id] }

// Set records st as the state of id (removing id when st is Pending).
func (s *States) Set(id ID, st State) {
	if s.ByID == nil {
		s.ByID = map[ID]State{}
	}
	if st.Pending() {
		delete(s.ByID, id)
		return
	}
	s.ByID[id] = st
}

// LoadStates reads the state topic of dlqTopic to its current end and returns the latest state of
// every dead letter for which keep (nil: all) is true, of the decisions that belong to the topic
// whose ID is topicID (State.BelongsTo): a later decision on the same key made on another
// incarnation of the topic leaves the dead letter Pending. Memory is proportional to the dead
// letters acted on, not to the records scanned. A missing state topic is an error matching
// kafka.ErrTopicNotFound.
func LoadStates(ctx context.Context, admin kafka.Admin, scanner kafka.Scanner, conn kafka.Connection, dlqTopic, topicID string, keep func(ID) bool) (*States, error) {
	out := &States{ByID: map[ID]State{}}
	_, err := ScanStates(ctx, admin, scanner, conn, dlqTopic, nil, func(id ID, st State, err error) {
		switch {
		case err != nil:
			out.Invalid++
		case keep != nil && !keep(id):
		case !st.BelongsTo(topicID):
			out.Foreign++
			out.Set(id, State{})
		default:
			out.Set(id, st)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ScanStates reads the state topic of dlqTopic from the offsets from (per partition; its start
// where lower or absent; nil: from the start) to its current end, and calls fn with every record:
// its key's ID and its value decoded, or err when either is invalid (a record whose key is no ID
// has the zero ID); read-from records (ReadFrom) are passed over. It returns the state topic's
// offsets as they were when the scan started (their End is where a later scan goes on). A missing
// state topic is an error matching kafka.ErrTopicNotFound.
func ScanStates(ctx context.Context, admin kafka.Admin, scanner kafka.Scanner, conn kafka.Connection, dlqTopic string, from map[int32]int64, fn func(id ID, st State, err error)) ([]kafka.PartitionOffsets, error) {
	return scanStates(ctx, admin, scanner, conn, dlqTopic, from, func(r stateRecord) {
		if r.readFrom == nil {
			fn(r.id, r.st, r.err)
		}
	})
}

// ScanStatesAt is ScanStates over the offsets span of the state topic as the caller listed them
// (Admin.ListOffsets of StateTopic(dlqTopic)): a caller that lists the dead letter topic's offsets
// after span knows every decision it is given was recorded on a record below those ends.
func ScanStatesAt(ctx context.Context, scanner kafka.Scanner, conn kafka.Connection, dlqTopic string, span []kafka.PartitionOffsets, from map[int32]int64, fn func(id ID, st State, err error)) error {
	topic, ok := StateTopic(dlqTopic)
	if !ok {
		return fmt.Errorf("dead letter topic %q has no valid state topic name", dlqTopic)
	}
	return scanStateRange(ctx, scanner, conn, topic, span, from, func(r stateRecord) {
		if r.readFrom == nil {
			fn(r.id, r.st, r.err)
		}
	})
}

// stateRecord is one record of a state topic as read: a decision (id, st or err) or, with readFrom
// set, a read-from record; at is its offset.
type stateRecord struct {
	id       ID
	st       State
	err      error
	at       int64
	readFrom *ReadFrom
}

func scanStates(ctx context.Context, admin kafka.Admin, scanner kafka.Scanner, conn kafka.Connection, dlqTopic string, from map[int32]int64, fn func(stateRecord)) ([]kafka.PartitionOffsets, error) {
	topic, ok := StateTopic(dlqTopic)
	if !ok {
		return nil, fmt.Errorf("dead letter topic %q has no valid state topic name", dlqTopic)
	}
	offsets, err := admin.ListOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	parts, ok := offsets[topic]
	if !ok {
		return nil, kafka.NewError("load states", kafka.KindTopicNotFound, fmt.Errorf("%w: %s", kafka.ErrTopicNotFound, topic), "")
	}
	if err := scanStateRange(ctx, scanner, conn, topic, parts, from, fn); err != nil {
		return nil, err
	}
	return parts, nil
}

func scanStateRange(ctx context.Context, scanner kafka.Scanner, conn kafka.Connection, topic string, parts []kafka.PartitionOffsets, from map[int32]int64, fn func(stateRecord)) error {
	ranges := map[int32]kafka.OffsetRange{}
	for _, p := range parts {
		start := max(p.Start, from[p.Partition])
		if p.End > start {
			ranges[p.Partition] = kafka.OffsetRange{From: start, To: p.End}
		}
	}
	if len(ranges) == 0 {
		return nil
	}
	return scanner.Scan(ctx, conn, map[string]map[int32]kafka.OffsetRange{topic: ranges}, func(r kafka.Record) {
		if string(r.Key) == ReadFromKey {
			if rf, err := decodeReadFrom(r.Value); err == nil {
				fn(stateRecord{at: r.Offset, readFrom: &rf})
			}
			return
		}
		id, ok := ParseID(string(bounded(r.Key, 31)))
		if !ok || len(r.Key) > 30 {
			fn(stateRecord{at: r.Offset, err: errors.New("state record key is no <partition>/<offset>")})
			return
		}
		st, err := DecodeState(r.Value)
		fn(stateRecord{id: id, st: st, err: err, at: r.Offset})
	})
}

// StateUpdate is one decision to record; a Pending State writes a tombstone.
type StateUpdate struct {
	ID    ID
	State State
	// ReadFrom, when set, makes the update a read-from record (ID and State unused), which a survey
	// returns after its tombstones.
	ReadFrom *ReadFrom
}

// WriteStates records updates in the state topic of dlqTopic, keyed "<partition>/<offset>", with the
// idempotent producer, and returns once every record is acknowledged. The error says how many
// failed; written reports, per update, whether its record was acknowledged.
func WriteStates(ctx context.Context, producer kafka.Producer, conn kafka.Connection, dlqTopic string, updates []StateUpdate) (written []bool, err error) {
	topic, ok := StateTopic(dlqTopic)
	if !ok {
		return make([]bool, len(updates)), fmt.Errorf("dead letter topic %q has no valid state topic name", dlqTopic)
	}
	recs := make([]kafka.ProduceRecord, len(updates))
	for i, u := range updates {
		recs[i] = kafka.ProduceRecord{Key: []byte(u.ID.String()), Partition: -1}
		if u.ReadFrom != nil {
			v, err := encodeReadFrom(*u.ReadFrom)
			if err != nil {
				return make([]bool, len(updates)), err
			}
			recs[i].Key, recs[i].Value = []byte(ReadFromKey), v
			continue
		}
		if !u.State.Pending() {
			v, err := EncodeState(u.State)
			if err != nil {
				return make([]bool, len(updates)), fmt.Errorf("state of %s: %w", u.ID, err)
			}
			recs[i].Value = v
		}
	}
	written = make([]bool, len(updates))
	res, err := producer.ProduceRecords(ctx, conn, topic, recs)
	if res == nil {
		return written, err
	}
	failed := 0
	for i, r := range res {
		written[i] = r.Err == nil
		if r.Err != nil {
			failed++
		}
	}
	if err != nil {
		return written, fmt.Errorf("%d of %d states not written: %w", failed, len(updates), err)
	}
	return written, nil
}
