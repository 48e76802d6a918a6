package deadletters_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

// TestReadFromGivesWhatAFullReadGives runs random sequences of dead-lettering, decisions (on
// records held, gone, and offsets the topic never held), resets, retention trimming and the
// reconciler's surveys, and checks after every step that a reader starting where the latest
// read-from record says (FindReadFrom, ScanStatesFrom) gets the same decisions on the dead letters
// held as one that reads the whole record of decisions (LoadStates), and that such readers did
// start there, reading less.
func TestReadFromGivesWhatAFullReadGives(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runReadFromSequence(t, seed) })
	}
}

func runReadFromSequence(t *testing.T, seed uint64) {
	ctx := ctxT(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	f := kafkafake.New()
	conn := kafka.Connection{BootstrapServers: []string{"fake:9092"}, ClientID: "test"}
	state, _ := deadletters.StateTopic(dlqTopic)
	f.AddTopic(dlqTopic, 1, 1, nil)
	f.AddTopic(state, 1, 1, deadletters.StateTopicConfigs())
	id := f.Topic(dlqTopic).ID
	states := []retryv1alpha1.DeadLetterState{retryv1alpha1.DeadLetterResolved, retryv1alpha1.DeadLetterIgnored, retryv1alpha1.DeadLetterReplayed, retryv1alpha1.DeadLetterPending}
	started, shorter := 0, 0
	for step := range 40 {
		offs := f.Offsets(dlqTopic)[0]
		switch k := rng.IntN(10); {
		case k < 2:
			f.Produce(dlqTopic, 0, int64(1+rng.IntN(400)))
		case k < 6:
			var ups []deadletters.StateUpdate
			for range 1 + rng.IntN(600) {
				o := offs.Start - 50 + rng.Int64N(offs.End-offs.Start+60)
				if rng.IntN(20) == 0 {
					o = 1<<40 + rng.Int64N(100) // never held
				}
				st := deadletters.State{State: states[rng.IntN(len(states))], RequestedBy: "alice", Time: seedBase, TopicID: id}
				if rng.IntN(10) == 0 {
					st.TopicID = ""
				}
				ups = append(ups, deadletters.StateUpdate{ID: deadletters.ID{Offset: max(o, 0)}, State: st})
			}
			if _, err := deadletters.WriteStates(ctx, f, conn, dlqTopic, ups); err != nil {
				t.Fatal(err)
			}
		case k < 7:
			if offs.End > offs.Start {
				if err := f.DeleteRecordsBefore(ctx, dlqTopic, map[int32]int64{0: offs.Start + rng.Int64N(offs.End-offs.Start+1)}); err != nil {
					t.Fatal(err)
				}
			}
		default:
			_, ups, err := deadletters.Survey(ctx, f, f, conn, dlqTopic, id, f.Offsets(dlqTopic), 1+rng.IntN(3000))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := deadletters.WriteStates(ctx, f, conn, dlqTopic, ups); err != nil {
				t.Fatal(err)
			}
		}
		offs = f.Offsets(dlqTopic)[0]
		held := func(d deadletters.ID) bool { return d.Partition == 0 && d.Offset >= offs.Start && d.Offset < offs.End }
		full, err := deadletters.LoadStates(ctx, f, f, conn, dlqTopic, id, held)
		if err != nil {
			t.Fatal(err)
		}
		span := f.Offsets(state)
		rf, err := deadletters.FindReadFrom(ctx, f, conn, dlqTopic, id, span)
		if err != nil {
			t.Fatal(err)
		}
		part := &deadletters.States{}
		read := 0
		if err := deadletters.ScanStatesFrom(ctx, f, conn, dlqTopic, span, rf, func(d deadletters.ID, st deadletters.State, err error) {
			read++
			switch {
			case err != nil, !held(d):
			case !st.BelongsTo(id):
				part.Set(d, deadletters.State{})
			default:
				part.Set(d, st)
			}
		}); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(full.ByID, part.ByID) {
			t.Fatalf("step %d: from the read-from record %+v: %d decisions, from the start %d; they differ", step, rf, len(part.ByID), len(full.ByID))
		}
		if rf != nil {
			started++
			if int64(read) < span[0].End-span[0].Start {
				shorter++
			}
		}
	}
	if started == 0 || shorter == 0 {
		t.Errorf("no reader started at a read-from record (%d) and read less (%d): the sequence tests nothing", started, shorter)
	}
}
