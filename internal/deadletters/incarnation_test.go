package deadletters_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

// incarnationSeeds is how many random sequences TestDecisionsBelongToTheirRecord runs; each is
// reproducible from its seed (the subtest's name).
const incarnationSeeds = 60

// TestDecisionsBelongToTheirRecord runs random sequences of dead-lettering, decisions (Resolve,
// Ignore), the topic deleted and created again under its name (its record of decisions kept, as the
// reconciler does), retention trimming, purges (one of them while the topic is being recreated) and
// the reconciler's tidying of the record of decisions, against a model that knows which record
// every decision was made on. After every step: no purge deleted a record without a decision made
// on that very record, and the counts by state equal the model's recount of the records held.
func TestDecisionsBelongToTheirRecord(t *testing.T) {
	for seed := range uint64(incarnationSeeds) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runIncarnationSequence(t, seed, 40) })
	}
}

// recreating is a ClientFactory whose scans of the dead letter topic can run a hook once, after the
// records were handed over: the topic changing under a purge between its scan and its deletion.
type recreating struct {
	*kafkafake.Fake
	mu   sync.Mutex
	hook func()
}

func (r *recreating) Scan(ctx context.Context, conn kafka.Connection, ranges map[string]map[int32]kafka.OffsetRange, fn func(kafka.Record)) error {
	err := r.Fake.Scan(ctx, conn, ranges, fn)
	r.mu.Lock()
	hook := r.hook
	if _, ok := ranges[dlqTopic]; ok {
		r.hook = nil
	} else {
		hook = nil
	}
	r.mu.Unlock()
	if hook != nil {
		hook()
	}
	return err
}

// model is what the sequence did: the serial of the record at each position of the topic as it
// is now, and the decision made on each serial.
type model struct {
	held    map[deadletters.ID]int // position -> serial
	decided map[int]retryv1alpha1.DeadLetterState
	serial  int
}

func (m *model) state(serial int) retryv1alpha1.DeadLetterState {
	if st, ok := m.decided[serial]; ok {
		return st
	}
	return retryv1alpha1.DeadLetterPending
}

func runIncarnationSequence(t *testing.T, seed uint64, steps int) {
	rnd := rand.New(rand.NewPCG(seed, 22))
	ctx := ctxT(t)
	fake := kafkafake.New()
	f := &recreating{Fake: fake}
	conn := kafka.Connection{BootstrapServers: []string{"fake:9092"}, ClientID: "test"}
	state, _ := deadletters.StateTopic(dlqTopic)
	fake.AddTopic(dlqTopic, partitions, 1, nil)
	fake.AddTopic(state, 1, 1, deadletters.StateTopicConfigs())
	m := &model{held: map[deadletters.ID]int{}, decided: map[int]retryv1alpha1.DeadLetterState{}}
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d after %s:\n"+format, append([]any{seed, strings.Join(log, ", ")}, args...)...)
	}

	deadLetter := func(n int) {
		recs := make([]kafka.ProduceRecord, n)
		for i := range recs {
			m.serial++
			recs[i] = kafka.ProduceRecord{Key: []byte("s" + strconv.Itoa(m.serial)), Value: []byte("v"), Partition: rnd.Int32N(partitions)}
		}
		res, err := fake.ProduceRecords(ctx, conn, dlqTopic, recs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			serial, _ := strconv.Atoi(string(recs[i].Key[1:]))
			m.held[deadletters.ID{Partition: r.Partition, Offset: r.Offset}] = serial
		}
	}
	recreate := func() {
		if err := fake.DeleteTopic(ctx, dlqTopic); err != nil {
			t.Fatal(err)
		}
		if err := fake.CreateTopic(ctx, dlqTopic, partitions, 1, nil); err != nil {
			t.Fatal(err)
		}
		clear(m.held)
	}
	offsets := func() []kafka.PartitionOffsets {
		offs, err := fake.ListOffsets(ctx, dlqTopic)
		if err != nil {
			t.Fatal(err)
		}
		return offs[dlqTopic]
	}
	trim := func() {
		before := map[int32]int64{}
		for _, p := range offsets() {
			if p.End > p.Start {
				before[p.Partition] = p.Start + rnd.Int64N(p.End-p.Start+1)
			}
		}
		if err := fake.DeleteRecordsBefore(ctx, dlqTopic, before); err != nil {
			t.Fatal(err)
		}
		for id := range m.held {
			if b, ok := before[id.Partition]; ok && id.Offset < b {
				delete(m.held, id)
			}
		}
	}
	run := func(action retryv1alpha1.DeadLetterActionType, sel *retryv1alpha1.DeadLetterSelector) error {
		snap, err := deadletters.Snapshot(ctx, fake, dlqTopic)
		if err != nil {
			t.Fatal(err)
		}
		_, err = deadletters.Run(ctx, deadletters.Options{
			Spec:  retryv1alpha1.DeadLetterActionSpec{Queue: "orders-dlq", Action: action, RequestedBy: "alice", Selector: sel},
			Ref:   deadletters.ActionRef{Namespace: "shop", Name: fmt.Sprintf("a%d", len(log)), UID: fmt.Sprintf("uid-%d-%d", seed, len(log))},
			Topic: dlqTopic, Conn: conn, Kafka: f, Snapshot: snap, Clock: newVirtualClock(),
		})
		return err
	}
	decide := func(action retryv1alpha1.DeadLetterActionType, want retryv1alpha1.DeadLetterState) {
		var keys []retryv1alpha1.RecordKey
		for _, serial := range m.held {
			if rnd.IntN(2) == 0 && len(keys) < 100 {
				keys = append(keys, retryv1alpha1.RecordKey("s"+strconv.Itoa(serial)))
			}
		}
		if len(keys) == 0 {
			return
		}
		if err := run(action, &retryv1alpha1.DeadLetterSelector{Keys: keys}); err != nil {
			fail("%s: %v", action, err)
		}
		for _, k := range keys {
			serial, _ := strconv.Atoi(string(k[1:]))
			if m.state(serial) == retryv1alpha1.DeadLetterPending {
				m.decided[serial] = want
			}
		}
	}
	// purge runs a Purge of every decided dead letter; during, when set, changes the topic under it.
	purge := func(during func()) {
		f.mu.Lock()
		f.hook = during
		f.mu.Unlock()
		err := run(retryv1alpha1.DeadLetterPurge, &retryv1alpha1.DeadLetterSelector{Before: &metav1.Time{Time: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}})
		f.mu.Lock()
		f.hook = nil
		f.mu.Unlock()
		if err != nil && during == nil {
			fail("purge: %v", err)
		}
		// What is gone: below the start offsets now, in the topic the model holds now.
		start := map[int32]int64{}
		for _, p := range offsets() {
			start[p.Partition] = p.Start
		}
		for id, serial := range m.held {
			if id.Offset < start[id.Partition] {
				if m.state(serial) == retryv1alpha1.DeadLetterPending {
					fail("the purge deleted %s (record s%d), on which no decision was made", id, serial)
				}
				delete(m.held, id)
			}
		}
	}

	for step := range steps {
		switch k := rnd.IntN(10); {
		case k < 3 || step == 0:
			n := 1 + rnd.IntN(12)
			log = append(log, fmt.Sprintf("deadLetter(%d)", n))
			deadLetter(n)
		case k == 3:
			log = append(log, "resolve")
			decide(retryv1alpha1.DeadLetterResolve, retryv1alpha1.DeadLetterResolved)
		case k == 4:
			log = append(log, "ignore")
			decide(retryv1alpha1.DeadLetterIgnore, retryv1alpha1.DeadLetterIgnored)
		case k == 5:
			log = append(log, "recreate")
			recreate()
		case k == 6:
			log = append(log, "trim")
			trim()
		case k == 7:
			log = append(log, "purge")
			purge(nil)
		case k == 8:
			// The topic is recreated and dead-lettered into between the purge's scan and its deletion.
			log = append(log, "purge while recreated")
			purge(func() {
				recreate()
				deadLetter(40)
			})
		default:
			log = append(log, "tidy")
			tidy(t, ctx, f, conn, 1+rnd.IntN(4))
		}
		offs := offsets()
		got := loadCurrent(t, ctx, fake, conn)
		counts := got.Counts(offs)
		want := map[retryv1alpha1.DeadLetterState]int64{retryv1alpha1.DeadLetterPending: 0, retryv1alpha1.DeadLetterReplayed: 0, retryv1alpha1.DeadLetterResolved: 0, retryv1alpha1.DeadLetterIgnored: 0}
		for _, serial := range m.held {
			want[m.state(serial)]++
		}
		if !maps.Equal(counts, want) {
			fail("counts by state %v, the model's recount %v (held %v)", counts, want, heldList(m))
		}
	}

	// Tidied to the end, the record of decisions holds the decisions on the records held, each
	// bound to the topic, and nothing else.
	for tidy(t, ctx, f, conn, deadletters.MaxTidyUpdates) > 0 {
	}
	id, err := deadletters.TopicID(ctx, fake, dlqTopic)
	if err != nil {
		t.Fatal(err)
	}
	latest := map[deadletters.ID]deadletters.State{}
	if _, err := deadletters.ScanStates(ctx, fake, fake, conn, dlqTopic, nil, func(x deadletters.ID, st deadletters.State, err error) {
		if err != nil {
			t.Fatal(err)
		}
		latest[x] = st
	}); err != nil {
		t.Fatal(err)
	}
	for x, st := range latest {
		serial, held := m.held[x]
		switch {
		case st.Pending():
		case !held:
			fail("tidied, the record of decisions still holds %s: %+v, on a record that is gone", x, st)
		case st.TopicID != id || st.State != m.state(serial):
			fail("tidied, the decision on %s (s%d, %s) is %+v (topic %s)", x, serial, m.state(serial), st, id)
		}
	}
}

func heldList(m *model) []string {
	var out []string
	for id, serial := range m.held {
		out = append(out, fmt.Sprintf("%s=s%d:%s", id, serial, m.state(serial)))
	}
	slices.Sort(out)
	return out
}

// loadCurrent loads the record of decisions as the reconciler counts it.
func loadCurrent(t *testing.T, ctx context.Context, admin kafka.ClientFactory, conn kafka.Connection) *deadletters.States {
	t.Helper()
	a, err := admin.Admin(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	id, err := deadletters.TopicID(ctx, a, dlqTopic)
	if err != nil {
		t.Fatal(err)
	}
	s, err := deadletters.LoadStates(ctx, a, admin, conn, dlqTopic, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tidy is the reconciler's tidying of the record of decisions, at most max updates: it returns how
// many it wrote.
func tidy(t *testing.T, ctx context.Context, f kafka.ClientFactory, conn kafka.Connection, max int) int {
	t.Helper()
	a, err := f.Admin(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	id, err := deadletters.TopicID(ctx, a, dlqTopic)
	if err != nil {
		t.Fatal(err)
	}
	offs, err := a.ListOffsets(ctx, dlqTopic)
	if err != nil {
		t.Fatal(err)
	}
	_, updates, err := deadletters.Survey(ctx, a, f, conn, dlqTopic, id, offs[dlqTopic], max)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deadletters.WriteStates(ctx, f, conn, dlqTopic, updates); err != nil {
		t.Fatal(err)
	}
	return len(updates)
}

// TestSurveyOfUnboundDecisions: decisions recorded where the brokers gave no topic IDs (none in
// the value), read once they give one: those on records held are bound to the topic's ID, those on
// records trimmed are tombstoned; before the topic is created again, Unbound tombstones every
// unbound decision.
func TestSurveyOfUnboundDecisions(t *testing.T) {
	ctx := ctxT(t)
	fake := kafkafake.New()
	conn := kafka.Connection{BootstrapServers: []string{"fake:9092"}, ClientID: "test"}
	state, _ := deadletters.StateTopic(dlqTopic)
	fake.AddTopic(dlqTopic, 1, 1, nil)
	fake.AddTopic(state, 1, 1, deadletters.StateTopicConfigs())
	fake.SetOffsets(dlqTopic, 0, 2, 4)
	resolved := deadletters.State{State: retryv1alpha1.DeadLetterResolved, RequestedBy: "alice", Time: seedBase}
	var updates []deadletters.StateUpdate
	for off := range int64(4) {
		updates = append(updates, deadletters.StateUpdate{ID: deadletters.ID{Offset: off}, State: resolved})
	}
	if _, err := deadletters.WriteStates(ctx, fake, conn, dlqTopic, updates); err != nil {
		t.Fatal(err)
	}
	id := fake.Topic(dlqTopic).ID
	states, got, err := deadletters.Survey(ctx, fake, fake, conn, dlqTopic, id, fake.Offsets(dlqTopic), 10)
	if err != nil {
		t.Fatal(err)
	}
	bound := resolved
	bound.TopicID = id
	want := []deadletters.StateUpdate{{ID: deadletters.ID{Offset: 0}}, {ID: deadletters.ID{Offset: 1}},
		{ID: deadletters.ID{Offset: 2}, State: bound}, {ID: deadletters.ID{Offset: 3}, State: bound}}
	slices.SortFunc(got, func(a, b deadletters.StateUpdate) int { return int(a.ID.Offset - b.ID.Offset) })
	if !slices.EqualFunc(got, want, func(a, b deadletters.StateUpdate) bool { return a.ID == b.ID && a.State == b.State }) || len(states.ByID) != 2 {
		t.Fatalf("survey: updates %+v, states %v; want %+v and the 2 held", got, states.ByID, want)
	}
	unbound, err := deadletters.Unbound(ctx, fake, fake, conn, dlqTopic)
	if err != nil || len(unbound) != 4 {
		t.Fatalf("unbound: %v, %v; want the 4 tombstones", unbound, err)
	}
}

// TestUnboundDecisionsWhereBrokersGiveNoTopicIDs: on brokers that give no topic IDs every decision
// is unbound. Survey counts those on records held and binds none of them (there is no ID to bind
// them to); Unbound tombstones them all, which is what the reconciler writes before it creates a
// deleted topic again, so that the new topic's dead letters at the same offsets are Pending.
func TestUnboundDecisionsWhereBrokersGiveNoTopicIDs(t *testing.T) {
	ctx := ctxT(t)
	fake := kafkafake.New()
	conn := kafka.Connection{BootstrapServers: []string{"fake:9092"}, ClientID: "test"}
	state, _ := deadletters.StateTopic(dlqTopic)
	fake.AddTopic(dlqTopic, 1, 1, nil)
	fake.AddTopic(state, 1, 1, deadletters.StateTopicConfigs())
	fake.SetOffsets(dlqTopic, 0, 0, 3)
	resolved := deadletters.State{State: retryv1alpha1.DeadLetterResolved, RequestedBy: "alice", Time: seedBase}
	var updates []deadletters.StateUpdate
	for off := range int64(3) {
		updates = append(updates, deadletters.StateUpdate{ID: deadletters.ID{Offset: off}, State: resolved})
	}
	if _, err := deadletters.WriteStates(ctx, fake, conn, dlqTopic, updates); err != nil {
		t.Fatal(err)
	}
	states, got, err := deadletters.Survey(ctx, fake, fake, conn, dlqTopic, "", fake.Offsets(dlqTopic), 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range got {
		if u.ReadFrom == nil {
			t.Errorf("survey without topic IDs wrote %+v; want no decision bound or dropped", u)
		}
	}
	if len(states.ByID) != 3 || states.Foreign != 0 {
		t.Fatalf("survey: %d decisions held, %d foreign; want 3 and 0", len(states.ByID), states.Foreign)
	}
	unbound, err := deadletters.Unbound(ctx, fake, fake, conn, dlqTopic)
	if err != nil || len(unbound) != 3 {
		t.Fatalf("unbound: %v, %v; want the 3 tombstones", unbound, err)
	}
	for _, u := range unbound {
		if u.State != (deadletters.State{}) || u.ReadFrom != nil {
			t.Errorf("unbound: %+v, want a tombstone", u)
		}
	}
}

// FuzzDecisionsBelongToTheirRecord is TestDecisionsBelongToTheirRecord as a fuzz target: the fuzzer
// picks the seed of the random sequence and its length (`make fuzz`); the seeds below run in
// `go test`.
func FuzzDecisionsBelongToTheirRecord(f *testing.F) {
	for seed := range uint64(4) {
		f.Add(seed, uint8(40))
	}
	f.Fuzz(func(t *testing.T, seed uint64, steps uint8) {
		runIncarnationSequence(t, seed, 1+int(steps)%80)
	})
}
