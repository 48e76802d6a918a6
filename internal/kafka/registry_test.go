package kafka

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// countingFactory records Forget calls.
type countingFactory struct{ forgotten []string }

func (f *countingFactory) Admin(context.Context, Connection) (Admin, error) {
	return nil, nil
}
func (f *countingFactory) Forget(key string) bool {
	f.forgotten = append(f.forgotten, key)
	return true
}

func TestRegistryForgetsAClientNobodyUses(t *testing.T) {
	f := &countingFactory{}
	r := NewRegistry(f, nil)
	old := Connection{BootstrapServers: []string{"k:9092"}, SASL: &SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "old", AllowPlaintext: true}}
	rotated := old
	rotated.SASL = &SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "new", AllowPlaintext: true}
	ctx := context.Background()
	expect := func(want ...string) {
		t.Helper()
		if !slices.Equal(f.forgotten, want) {
			t.Fatalf("forgotten %q, want %q", f.forgotten, want)
		}
	}

	_, _, _ = r.Admin(ctx, "a", old)
	_, _, _ = r.Admin(ctx, "b", old)
	_, _, _ = r.Admin(ctx, "a", rotated)
	expect() // b still uses the old client
	_, _, _ = r.Admin(ctx, "b", rotated)
	expect(old.Key())
	_, _, _ = r.Admin(ctx, "b", rotated)
	r.Release("a")
	expect(old.Key())
	r.Release("b")
	expect(old.Key(), rotated.Key())
	r.Release("b")
	expect(old.Key(), rotated.Key())
	if strings.Contains(strings.Join(f.forgotten, ""), "new") {
		t.Fatal("a key reveals the password")
	}
}

// TestRegistryDropsAUserThatStopsAsking: a user deleted without a Release (its resource gone) is
// dropped once its lease is over, so that it no longer keeps a rotated-away client open; dropping it
// closes nothing by itself.
func TestRegistryDropsAUserThatStopsAsking(t *testing.T) {
	f := &countingFactory{}
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	r := NewRegistry(f, clk)
	old := Connection{BootstrapServers: []string{"k:9092"}, SASL: &SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "old", AllowPlaintext: true}}
	rotated := old
	rotated.SASL = &SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "new", AllowPlaintext: true}
	ctx := context.Background()
	_, _, _ = r.Admin(ctx, "deleted", old)
	_, _, _ = r.Admin(ctx, "alive", old)
	for range 3 {
		clk.SetTime(clk.Now().Add(RegistryLease))
		_, _, _ = r.Admin(ctx, "alive", old)
	}
	if len(f.forgotten) != 0 || r.Users() != 1 {
		t.Fatalf("forgotten %q with %d users: dropping a user must close nothing", f.forgotten, r.Users())
	}
	_, _, _ = r.Admin(ctx, "alive", rotated)
	if !slices.Equal(f.forgotten, []string{old.Key()}) {
		t.Fatalf("forgotten %q: the old client is nobody's once the deleted user's lease ended", f.forgotten)
	}
}

// TestRegistryKeepsAHeldUserPastItsLease: a replay asks for its client once and runs for longer
// than the lease; held, it keeps the client open through a rotation of the others until its
// Release.
func TestRegistryKeepsAHeldUserPastItsLease(t *testing.T) {
	f := &countingFactory{}
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	r := NewRegistry(f, clk)
	ctx := context.Background()
	old := Connection{BootstrapServers: []string{"k:9092"}, SASL: &SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "old", AllowPlaintext: true}}
	rotated := old
	rotated.SASL = &SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "new", AllowPlaintext: true}
	_, _, _ = r.Admin(ctx, "DeadLetterQueue/ns/q", old)
	_, _, _ = r.Admin(ctx, "DeadLetterAction/ns/replay", old)
	r.Hold("DeadLetterAction/ns/replay")
	for range 70 {
		clk.SetTime(clk.Now().Add(30 * time.Second))
		_, _, _ = r.Admin(ctx, "DeadLetterQueue/ns/q", old)
	}
	_, _, _ = r.Admin(ctx, "DeadLetterQueue/ns/q", rotated)
	if len(f.forgotten) != 0 {
		t.Fatalf("closed %q under the running replay", f.forgotten)
	}
	r.Release("DeadLetterAction/ns/replay")
	if !slices.Equal(f.forgotten, []string{old.Key()}) {
		t.Fatalf("forgotten %q after the replay's Release, want the old client", f.forgotten)
	}
}
