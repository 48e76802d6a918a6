package controllers

import (
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
)

// notes keeps the notes it is asked to record.
type notes struct{ got []string }

func (n *notes) Eventf(_, _ runtime.Object, _, _, _, note string, args ...any) {
	n.got = append(n.got, note)
	if len(args) == 1 {
		n.got[len(n.got)-1] = args[0].(string)
	}
}

func (n *notes) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	n.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// TestEventNotesFitTheAPIServersBound: a note longer than the API server takes (a reference's
// message with a 253-character Secret name, how long it has been missing) is cut to noteLimit bytes
// on a character boundary; a short one is recorded as it is, its arguments formatted.
func TestEventNotesFitTheAPIServersBound(t *testing.T) {
	n := &notes{}
	b := boundedNotes{n}
	b.Eventf(nil, nil, "Warning", "R", "A", "Secret %q not found (missing for %s)", strings.Repeat("é", 600), "2m0s")
	b.AnnotatedEventf(nil, nil, nil, "Normal", "R", "A", "topic %s created", "t")
	if len(n.got) != 2 {
		t.Fatalf("recorded %d", len(n.got))
	}
	if long := n.got[0]; len(long) > noteLimit || !utf8.ValidString(long) || !strings.HasPrefix(long, `Secret "éé`) {
		t.Errorf("long note: %d bytes, valid %v: %.40q", len(long), utf8.ValidString(long), long)
	}
	if n.got[1] != "topic t created" {
		t.Errorf("short note: %q", n.got[1])
	}
}
