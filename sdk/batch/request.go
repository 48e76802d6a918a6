package batch

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Request is the body of a batch request.
type Request struct {
	// Version is Version.
	Version string `json:"version"`
	// Records are the batch's records, in the order a sink in Ordered mode must process them.
	Records []Record `json:"records"`
}

// TimestampLayout is how a record's timestamp is written: RFC 3339, milliseconds, UTC.
const TimestampLayout = "2006-01-02T15:04:05.000Z07:00"

// Record is one record of a batch request.
type Record struct {
	// ID addresses the record's result in the response: opaque, unique in the request and not
	// reused by another request.
	ID string `json:"id"`
	// IdempotencyKey is the record's stable id, the same on every attempt and on a replay:
	// "<topic>/<partition>/<offset>" of the original record.
	IdempotencyKey string `json:"idempotencyKey"`
	// Attempt is the delivery attempt, 1 for the first delivery.
	Attempt int32 `json:"attempt"`
	// Topic, Partition and Offset are the record's original coordinates.
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// Timestamp is the original record's Kafka timestamp (written as TimestampLayout).
	Timestamp time.Time `json:"timestamp"`
	// RawKey is the record's key; Key returns it.
	RawKey Bytes `json:"key"`
	// RawValue is the record's value; Value returns it.
	RawValue Bytes `json:"value"`
	// Headers are the record's own headers (none of the dispatcher's).
	Headers []Header `json:"headers,omitempty"`
	// FirstFailure is the time of the record's first failed delivery, absent on a first attempt.
	FirstFailure *time.Time `json:"firstFailure,omitempty"`
	// ReplayOf names the dead letter this record replays, "<dlq topic>/<partition>/<offset>".
	ReplayOf string `json:"replayOf,omitempty"`
	// ReplayCount is how many times the record has been replayed, with ReplayOf.
	ReplayCount int32 `json:"replayCount,omitempty"`
	// DeliveredFrom is "<topic>/<partition>/<offset>" of the record consumed: a retry tier's record
	// on a retry, the original record otherwise (then equal to IdempotencyKey). A single delivery
	// sends it as the Retryops-Delivered-From header.
	DeliveredFrom string `json:"deliveredFrom,omitempty"`
}

// Key returns the record's key, nil when it has none.
func (r *Record) Key() []byte { return r.RawKey }

// Value returns the record's value, nil when it has none.
func (r *Record) Value() []byte { return r.RawValue }

type plainRecord Record

// recordWire is a record as written: its times as TimestampLayout, which, unlike time.Time's JSON,
// takes any year (a Kafka timestamp is whatever a producer chose; one past 9999 must not fail the
// whole batch).
type recordWire struct {
	plainRecord
	Timestamp    string  `json:"timestamp"`
	FirstFailure *string `json:"firstFailure,omitempty"`
}

// MarshalJSON implements json.Marshaler, writing the times as TimestampLayout.
func (r Record) MarshalJSON() ([]byte, error) {
	w := recordWire{plainRecord: plainRecord(r), Timestamp: r.Timestamp.UTC().Format(TimestampLayout)}
	if r.FirstFailure != nil {
		ff := r.FirstFailure.UTC().Format(TimestampLayout)
		w.FirstFailure = &ff
	}
	return json.Marshal(w)
}

// UnmarshalJSON implements json.Unmarshaler, reading the times MarshalJSON writes.
func (r *Record) UnmarshalJSON(data []byte) error {
	var w recordWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*r = Record(w.plainRecord)
	var err error
	if r.Timestamp, err = parseTime(w.Timestamp); err != nil {
		return err
	}
	if w.FirstFailure != nil {
		ff, err := parseTime(*w.FirstFailure)
		if err != nil {
			return err
		}
		r.FirstFailure = &ff
	}
	return nil
}

// parseTime reads an RFC 3339 time, or one whose year has more than four digits or a sign (as
// time.Format writes a year outside 0-9999); "" is the zero time.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err == nil || len(s) < 2 {
		return t, err
	}
	i := strings.IndexByte(s[1:], '-') + 1
	year, yerr := strconv.Atoi(s[:max(i, 0)])
	if i <= 0 || yerr != nil {
		return t, err
	}
	rest, rerr := time.Parse(time.RFC3339Nano, "2000"+s[i:]) // a leap year: 02-29 reads
	if rerr != nil {
		return t, err
	}
	return time.Date(year, rest.Month(), rest.Day(), rest.Hour(), rest.Minute(), rest.Second(), rest.Nanosecond(), rest.Location()), nil
}

// EncodeRequest writes the request document of recs to w. The caller sets each record's ID and
// sends the body with Content-Type MediaType.
func EncodeRequest(w io.Writer, recs []Record) error {
	if recs == nil {
		recs = []Record{}
	}
	return json.NewEncoder(w).Encode(Request{Version: Version, Records: recs})
}

// ParseRequest reads a batch request as a sink: its media type must be MediaType (the version
// parameter may be left out), its body at most limit bytes and a document of Version whose ids are
// unique and not empty. A failure is an *Error; its StatusCode is the answer to give.
func ParseRequest(r *http.Request, limit int64) (*Request, error) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != mediaTypeBase {
		return nil, errorf(ErrorTypeUnsupportedMediaType, "Content-Type %q is not %s", r.Header.Get("Content-Type"), MediaType)
	}
	if v, ok := params["version"]; ok && v != mediaVersion {
		return nil, errorf(ErrorTypeUnsupportedMediaType, "media type version %q is not %s", v, mediaVersion)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, errorf(ErrorTypeRequestInvalid, "reading the body: %v", err)
	}
	if int64(len(body)) > limit {
		return nil, errorf(ErrorTypeRequestTooLarge, "body over %d bytes", limit)
	}
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, errorf(ErrorTypeRequestInvalid, "%v", err)
	}
	if err := checkVersion(req.Version, ErrorTypeRequestInvalid); err != nil {
		return nil, err
	}
	seen := make(map[string]struct{}, len(req.Records))
	for i := range req.Records {
		id := req.Records[i].ID
		if _, dup := seen[id]; dup || id == "" {
			return nil, errorf(ErrorTypeRequestInvalid, "record %d: id %q empty or not unique", i, id)
		}
		seen[id] = struct{}{}
	}
	return &req, nil
}

// checkVersion refuses a document of another version, naming it.
func checkVersion(v, typ string) *Error {
	if v == Version {
		return nil
	}
	if v == "" {
		return errorf(typ, "no version (this reader reads %s)", Version)
	}
	return errorf(typ, "version %s is not supported (this reader reads %s)", strconv.Quote(v), Version)
}
