package dlqcli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
)

// LetterColumns are the CSV columns of list -o csv and export -o csv, in order. Times are RFC 3339
// (UTC); key and value are as the deadletters API gives them, in the encoding of the next column
// (text or base64); headers is a JSON array of {"name","value","encoding"}; a value cut by the list
// (over 64 KiB) has valueTruncated true.
var LetterColumns = []string{
	"queue", "partition", "offset", "timestamp", "state", "reason", "errorType", "errorMessage", "httpStatus", "attempts",
	"pipeline", "consumerGroup", "originalTopic", "originalPartition", "originalOffset", "firstFailureTime", "lastFailureTime",
	"replayCount", "key", "keyEncoding", "value", "valueEncoding", "valueTruncated", "headers",
	"stateNote", "stateRequestedBy", "stateTime",
}

func rfc3339(t interface{ IsZero() bool }, v time.Time) string {
	if t.IsZero() {
		return ""
	}
	return v.UTC().Format(time.RFC3339)
}

// letterCSV is one dead letter's CSV row.
func letterCSV(d *dlv1.DeadLetter) []string {
	var ot, op, oo string
	if d.Original != nil {
		ot, op, oo = d.Original.Topic, itoa(int64(d.Original.Partition)), itoa(d.Original.Offset)
	}
	var first, last, stateTime string
	if d.FirstFailureTime != nil {
		first = rfc3339(d.FirstFailureTime, d.FirstFailureTime.Time)
	}
	if d.LastFailureTime != nil {
		last = rfc3339(d.LastFailureTime, d.LastFailureTime.Time)
	}
	if d.State.Time != nil {
		stateTime = rfc3339(d.State.Time, d.State.Time.Time)
	}
	payload := func(p *dlv1.Payload) (string, string, string) {
		if p == nil {
			return "", "", ""
		}
		return p.Data, string(p.Encoding), strconv.FormatBool(p.Truncated)
	}
	k, ke, _ := payload(d.Key)
	v, ve, vt := payload(d.Value)
	headers := "[]"
	if len(d.Headers) > 0 {
		b, _ := json.Marshal(d.Headers)
		headers = string(jsonSafe(b))
	}
	return []string{
		d.Queue, itoa(int64(d.Partition)), itoa(d.Offset), rfc3339(&d.CreationTimestamp, d.CreationTimestamp.Time), string(d.State.State),
		d.Reason, d.ErrorType, d.ErrorMessage, itoa(int64(d.HTTPStatus)), itoa(int64(d.Attempts)),
		d.Pipeline, d.ConsumerGroup, ot, op, oo, first, last,
		itoa(int64(d.ReplayCount)), k, ke, v, ve, vt, headers,
		d.State.Note, d.State.RequestedBy, stateTime,
	}
}

// letterRows prints dead letters as a table (wide) or CSV, as they come.
type letterRows struct {
	o   *Options
	t   *table
	c   *csvWriter
	n   int
	now time.Time
}

func newLetterRows(o *Options) *letterRows {
	r := &letterRows{o: o, now: o.now()}
	switch o.output {
	case outCSV:
		r.c = newCSV(o, o.streams.Out, LetterColumns...)
	case outWide:
		r.t = newTable(o.streams.Out, o.noHeaders, "DEAD LETTER", "AGE", "STATE", "REASON", "ERROR TYPE", "PIPELINE", "ATTEMPTS", "KEY", "HTTP", "ORIGINAL", "ERROR")
	default:
		r.t = newTable(o.streams.Out, o.noHeaders, "DEAD LETTER", "AGE", "STATE", "REASON", "ERROR TYPE", "PIPELINE", "ATTEMPTS", "KEY")
	}
	return r
}

func (r *letterRows) add(d *dlv1.DeadLetter) error {
	r.n++
	if r.c != nil {
		return r.c.Write(letterCSV(d))
	}
	row := []string{fmt.Sprintf("%d/%d", d.Partition, d.Offset), age(r.now.Sub(d.CreationTimestamp.Time)), string(d.State.State),
		orNone(d.Reason), orNone(d.ErrorType), orNone(d.Pipeline), itoa(int64(d.Attempts)), orNone(short(payloadText(d.Key), 24))}
	if r.o.output == outWide {
		orig := ""
		if d.Original != nil {
			orig = fmt.Sprintf("%s/%d/%d", d.Original.Topic, d.Original.Partition, d.Original.Offset)
		}
		row = append(row, itoa(int64(d.HTTPStatus)), orNone(orig), orNone(short(d.ErrorMessage, 60)))
	}
	r.t.row(row...)
	return nil
}

func (r *letterRows) flush() error {
	if r.c != nil {
		r.c.Flush()
		return r.c.Error()
	}
	return r.t.flush()
}

// payloadText is a key or value for one line: text as is (newlines as spaces), base64 prefixed.
func payloadText(p *dlv1.Payload) string {
	if p == nil {
		return ""
	}
	if p.Encoding == dlv1.EncodingBase64 {
		return "base64:" + p.Data
	}
	return strings.Join(strings.Fields(p.Data), " ")
}

// short cuts s to n runes with an ellipsis.
func short(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// prettyPayload is a key or value for show: JSON indented, other text as is, binary as base64.
func prettyPayload(p *dlv1.Payload) (string, string) {
	if p.Encoding == dlv1.EncodingBase64 {
		return p.Data, "binary, base64"
	}
	var buf bytes.Buffer
	if json.Valid([]byte(p.Data)) && json.Indent(&buf, []byte(p.Data), "", "  ") == nil {
		return buf.String(), "JSON"
	}
	return p.Data, "text"
}

// describeLetter prints one dead letter for a person.
func describeLetter(o *Options, d *dlv1.DeadLetter) error {
	var b strings.Builder
	line := func(label, value string) {
		if value != "" {
			fmt.Fprintf(&b, "%-16s%s\n", label+":", escapeLine(value))
		}
	}
	line("Dead letter", fmt.Sprintf("%s %d/%d (topic %s, namespace %s)", d.Queue, d.Partition, d.Offset, d.Topic, d.Namespace))
	line("Dead-lettered", fmt.Sprintf("%s (%s ago)", d.CreationTimestamp.UTC().Format(time.RFC3339), age(o.now().Sub(d.CreationTimestamp.Time))))
	state := string(d.State.State)
	if d.State.RequestedBy != "" {
		state += " by " + d.State.RequestedBy
	}
	if d.State.Time != nil {
		state += " at " + d.State.Time.UTC().Format(time.RFC3339)
	}
	if d.State.Action != nil {
		state += " (action " + d.State.Action.Name + ")"
	}
	line("State", state)
	line("Note", d.State.Note)
	line("Reason", d.Reason)
	errLine := d.ErrorType
	if d.HTTPStatus != 0 {
		errLine += fmt.Sprintf(" (HTTP %d)", d.HTTPStatus)
	}
	line("Error type", strings.TrimSpace(errLine))
	line("Error", d.ErrorMessage)
	pipeline := d.Pipeline
	if d.ConsumerGroup != "" {
		pipeline += " (consumer group " + d.ConsumerGroup + ")"
	}
	line("Pipeline", pipeline)
	attempts := itoa(int64(d.Attempts))
	if d.FirstFailureTime != nil && d.LastFailureTime != nil {
		attempts += fmt.Sprintf(" (first failure %s, last %s)", d.FirstFailureTime.UTC().Format(time.RFC3339), d.LastFailureTime.UTC().Format(time.RFC3339))
	}
	line("Attempts", attempts)
	if d.Original != nil {
		orig := fmt.Sprintf("%s/%d/%d", d.Original.Topic, d.Original.Partition, d.Original.Offset)
		if d.Original.Time != nil {
			orig += " at " + d.Original.Time.UTC().Format(time.RFC3339)
		}
		line("Original", orig)
	}
	if d.ReplayOf != "" {
		line("Replay of", fmt.Sprintf("%s (replayed %d times before)", d.ReplayOf, d.ReplayCount))
	}
	if d.Key != nil {
		line("Key", payloadText(d.Key))
	}
	fmt.Fprintf(&b, "Headers:\n")
	if len(d.Headers) == 0 {
		fmt.Fprintf(&b, "  <none>\n")
	}
	for _, h := range d.Headers {
		v := h.Value
		if h.Encoding == dlv1.EncodingBase64 {
			v = "base64:" + v
		}
		fmt.Fprintf(&b, "  %s: %s\n", escapeLine(h.Name), escapeLine(v))
	}
	if d.Value == nil {
		fmt.Fprintf(&b, "Value:          <none>\n")
	} else {
		text, kind := prettyPayload(d.Value)
		cut := ""
		if d.Value.Truncated {
			cut = ", cut"
		}
		fmt.Fprintf(&b, "Value (%d bytes, %s%s):\n%s\n", d.Value.Size, kind, cut, escapeText(strings.TrimRight(text, "\n")))
	}
	_, err := fmt.Fprint(o.streams.Out, b.String())
	return err
}
