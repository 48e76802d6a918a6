package kafka

import (
	"context"
	"slices"
	"strings"
	"testing"
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
	r := NewRegistry(f)
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
