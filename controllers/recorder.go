package controllers

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// noteLimit is the API server's bound on an event's note (events.k8s.io/v1, in bytes): it refuses
// a longer one, and the recorder only logs that the event was lost.
const noteLimit = 1024

// boundedNotes records events with their note cut to noteLimit: a note built from messages that
// hold names, a Secret's, a topic's, and the brokers' errors may be longer (a missing reference's
// Warning, its message and how long it has been missing, comes within a few bytes of it).
type boundedNotes struct{ recorder.EventRecorder }

// Eventf implements events.EventRecorder.
func (b boundedNotes) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	b.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", truncate(fmt.Sprintf(note, args...), noteLimit))
}

// AnnotatedEventf implements events.AnnotatedEventRecorder.
func (b boundedNotes) AnnotatedEventf(regarding, related runtime.Object, annotations map[string]string, eventtype, reason, action, note string, args ...any) {
	b.EventRecorder.AnnotatedEventf(regarding, related, annotations, eventtype, reason, action, "%s", truncate(fmt.Sprintf(note, args...), noteLimit))
}
