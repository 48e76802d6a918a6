package kafkafake

import (
	"context"
	"fmt"
	"slices"
)

// newID returns a topic ID no topic of f had before, shaped like Kafka's (a UUID). f.mu must be held.
func (f *Fake) newID() string {
	f.ids++
	return fmt.Sprintf("00000000-0000-4000-8000-%012x", f.ids)
}

// TopicIDs implements kafka.Admin.
func (f *Fake) TopicIDs(ctx context.Context, names ...string) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, TopicIDs, slices.Clone(names)); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(names))
	for _, n := range names {
		if t, ok := f.topics[n]; ok {
			out[n] = t.id
		}
	}
	return out, nil
}
