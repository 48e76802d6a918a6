package dlqapi

import (
	"encoding/base64"
	"strings"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
)

// Name is a dead letter's object name: "<queue>.<partition>.<offset>".
func Name(queue string, id deadletters.ID) string {
	return dlv1.Name(queue, id.Partition, id.Offset)
}

// ParseName splits an object name into queue and ID; ok is false unless it has that form.
func ParseName(name string) (queue string, id deadletters.ID, ok bool) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 {
		return "", deadletters.ID{}, false
	}
	j := strings.LastIndexByte(name[:i], '.')
	if j <= 0 {
		return "", deadletters.ID{}, false
	}
	id, ok = deadletters.ParseID(name[j+1:i] + "/" + name[i+1:])
	return name[:j], id, ok
}

// labelsOf are a dead letter's labels.
func labelsOf(queue string, e *deadletters.Entry, st deadletters.State) map[string]string {
	return dlv1.Labels(queue, e.Pipeline, e.Reason, e.ErrorType, dlv1.State(st.Name()))
}

// toObject makes the DeadLetter of e; a key, value, header name or header value longer than
// maxPayload (0: no bound) is cut.
func toObject(namespace, queue, topic string, e *deadletters.Entry, st deadletters.State, lbls map[string]string, maxPayload int) dlv1.DeadLetter {
	d := dlv1.DeadLetter{
		TypeMeta: metav1.TypeMeta{APIVersion: dlv1.SchemeGroupVersion.String(), Kind: dlv1.Kind},
		ObjectMeta: metav1.ObjectMeta{
			Name:              Name(queue, e.ID),
			Namespace:         namespace,
			CreationTimestamp: metav1.NewTime(e.Time),
			Labels:            lbls,
		},
		Queue:            queue,
		Topic:            topic,
		Partition:        e.Partition,
		Offset:           e.Offset,
		Pipeline:         e.Pipeline,
		ConsumerGroup:    e.ConsumerGroup,
		Reason:           e.Reason,
		ErrorType:        e.ErrorType,
		ErrorMessage:     e.ErrorMessage,
		HTTPStatus:       int32(e.HTTPStatus),
		Attempts:         int32(e.Attempts),
		ReplayOf:         e.ReplayOf,
		ReplayCount:      int32(e.ReplayCount),
		FirstFailureTime: timeOf(e.FirstFailure),
		LastFailureTime:  timeOf(e.LastFailure),
		Key:              payload(e.Key, maxPayload),
		Value:            payload(e.Value, maxPayload),
		State: dlv1.DeadLetterStatus{
			State:       dlv1.State(st.Name()),
			Note:        st.Note,
			RequestedBy: st.RequestedBy,
			Time:        timeOf(st.Time),
		},
	}
	if st.ReplayCount > int(d.ReplayCount) {
		d.ReplayCount = int32(st.ReplayCount)
	}
	if st.Action.Name != "" {
		d.State.Action = &dlv1.ActionRef{Namespace: st.Action.Namespace, Name: st.Action.Name, UID: st.Action.UID}
	}
	if e.HasOriginal {
		d.Original = &dlv1.Original{Topic: e.OriginalTopic, Partition: e.OriginalPartition, Offset: e.OriginalOffset, Time: timeOf(e.OriginalTimestamp)}
	}
	if len(e.Headers) > 0 {
		d.Headers = make([]dlv1.Header, len(e.Headers))
		for i, h := range e.Headers {
			d.Headers[i] = header(h.Key, h.Value, maxPayload)
		}
	}
	return d
}

func timeOf(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t)
	return &mt
}

// payload is b as a Payload, cut to max bytes when max > 0 (on a UTF-8 boundary for text).
func payload(b []byte, max int) *dlv1.Payload {
	if b == nil {
		return nil
	}
	p := &dlv1.Payload{Size: int64(len(b))}
	if max > 0 && len(b) > max {
		b, p.Truncated = cutBytes(b, max), true
	}
	p.Data, p.Encoding = encode(b)
	return p
}

// header is a header, its name and value cut to max bytes when max > 0 (Truncated, and Size the
// whole value's length, say so).
func header(name string, value []byte, max int) dlv1.Header {
	var h dlv1.Header
	if max > 0 && len(name) > max {
		name, h.Truncated = string(cutBytes([]byte(name), max)), true
	}
	if max > 0 && len(value) > max {
		h.Size, h.Truncated = int64(len(value)), true
		value = cutBytes(value, max)
	}
	h.Name = name
	h.Value, h.Encoding = encode(value)
	return h
}

// cutBytes is b cut to max bytes, on a UTF-8 boundary when b is text.
func cutBytes(b []byte, max int) []byte {
	if len(b) <= max {
		return b
	}
	cut := max
	if utf8.Valid(b) {
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
	}
	return b[:cut]
}

// approxSize is about how many bytes d takes in a response: its variable parts and a fixed share.
func approxSize(d *dlv1.DeadLetter) int64 {
	n := 1024 + len(d.Name) + len(d.Queue) + len(d.Topic) + len(d.Pipeline) + len(d.ConsumerGroup) + len(d.Reason) +
		len(d.ErrorType) + len(d.ErrorMessage) + len(d.ReplayOf) + len(d.State.Note) + len(d.State.RequestedBy)
	for _, v := range d.Labels {
		n += len(v) + 40
	}
	for _, p := range []*dlv1.Payload{d.Key, d.Value} {
		if p != nil {
			n += len(p.Data)
		}
	}
	for _, h := range d.Headers {
		n += 48 + len(h.Name) + len(h.Value)
	}
	return int64(n)
}

// encode is b as text when it is valid UTF-8, else base64.
func encode(b []byte) (string, dlv1.Encoding) {
	if utf8.Valid(b) {
		return string(b), dlv1.EncodingText
	}
	return base64.StdEncoding.EncodeToString(b), dlv1.EncodingBase64
}

func encodeB64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
