package batch

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleRecords() []Record {
	ff := time.Date(2025, 1, 2, 3, 0, 0, 0, time.UTC)
	return []Record{
		{ID: "0", IdempotencyKey: "orders/3/1042", Attempt: 1, Topic: "orders", Partition: 3, Offset: 1042,
			Timestamp: time.Date(2025, 1, 2, 3, 4, 5, 678000000, time.UTC), RawKey: Bytes("customer-7"), RawValue: Bytes(`{"n":1}`),
			Headers: []Header{{Key: "trace", Value: []byte("abc")}, {Key: "bin", Value: []byte{0xff, 0}}, {Key: "nil"}}},
		{ID: "1", IdempotencyKey: "orders/3/1043", Attempt: 4, Topic: "orders", Partition: 3, Offset: 1043,
			Timestamp: time.Date(2025, 1, 2, 3, 4, 6, 0, time.UTC), RawKey: nil, RawValue: Bytes{0x00, 0xc3, 0x28},
			FirstFailure: &ff, ReplayOf: "orders-dlq/0/7", ReplayCount: 2, DeliveredFrom: "orders-retry-1/0/9"},
		{ID: "2", IdempotencyKey: "orders/0/1", Attempt: 1, Topic: "orders", Offset: 1,
			Timestamp: time.Date(2025, 1, 2, 3, 4, 7, 0, time.UTC), RawKey: Bytes{}, RawValue: Bytes{}},
	}
}

func TestEncodeRequestWritesTextOrBase64(t *testing.T) {
	var buf bytes.Buffer
	if err := EncodeRequest(&buf, sampleRecords()[:2]); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"version":"retryops.dev/batch/v1"`, `"key":{"text":"customer-7"}`, `"value":{"base64":"AMMo"}`,
		`"key":null`, `{"key":"bin","base64":"/wA="}`, `{"key":"nil"}`, `"timestamp":"2025-01-02T03:04:05.678Z"`,
		`"timestamp":"2025-01-02T03:04:06.000Z"`, `"replayOf":"orders-dlq/0/7"`, `"deliveredFrom":"orders-retry-1/0/9"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("request lacks %s:\n%s", want, buf.String())
		}
	}
}

// sink is a sink author's handler: it fails records whose value is not valid JSON text.
func sink(t *testing.T, got *Request) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req, err := ParseRequest(r, 1<<20)
		if err != nil {
			var e *Error
			errors.As(err, &e)
			http.Error(w, err.Error(), e.StatusCode())
			return
		}
		*got = *req
		results := make([]Result, 0, len(req.Records))
		for _, rec := range req.Records {
			if bytes.HasPrefix(rec.Value(), []byte("{")) {
				results = append(results, Success(rec.ID))
				continue
			}
			f := Failure(rec.ID, 422, "NotJSON", "value is not JSON")
			f.RetryAfter = 1500 * time.Millisecond
			results = append(results, f)
		}
		if err := WriteResults(w, results); err != nil {
			t.Error(err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	var got Request
	srv := httptest.NewServer(sink(t, &got))
	defer srv.Close()
	recs := sampleRecords()
	var buf bytes.Buffer
	if err := EncodeRequest(&buf, recs); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(srv.URL, MediaType, &buf)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != MediaType {
		t.Fatalf("answer %s %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	for i := range recs {
		recs[i].Timestamp = recs[i].Timestamp.UTC()
	}
	if !reflect.DeepEqual(got.Records, recs) {
		t.Errorf("the sink read\n%+v\nnot\n%+v", got.Records, recs)
	}
	res, err := ParseResponse(resp.Body, []string{"0", "1", "2"}, ResponseLimit(3))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Result{"0": Success("0"),
		"1": {ID: "1", Status: StatusFailure, HTTPStatus: 422, ErrorType: "NotJSON", Message: "value is not JSON", RetryAfter: 1500 * time.Millisecond},
		"2": {ID: "2", Status: StatusFailure, HTTPStatus: 422, ErrorType: "NotJSON", Message: "value is not JSON", RetryAfter: 1500 * time.Millisecond}}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("results\n%+v\nwant\n%+v", res, want)
	}
}

func TestParseRequestRefuses(t *testing.T) {
	valid := `{"version":"retryops.dev/batch/v1","records":[{"id":"0","value":{"text":"x"}}]}`
	cases := []struct {
		name, contentType, body, errType string
	}{
		{"another media type", "application/json", valid, ErrorTypeUnsupportedMediaType},
		{"another media type version", "application/vnd.retryops.batch+json; version=2", valid, ErrorTypeUnsupportedMediaType},
		{"a body over the limit", MediaType, valid + strings.Repeat(" ", 1000), ErrorTypeRequestTooLarge},
		{"invalid JSON", MediaType, `{"version":`, ErrorTypeRequestInvalid},
		{"another major version", MediaType, `{"version":"retryops.dev/batch/v2","records":[]}`, ErrorTypeRequestInvalid},
		{"a duplicated id", MediaType, `{"version":"retryops.dev/batch/v1","records":[{"id":"0"},{"id":"0"}]}`, ErrorTypeRequestInvalid},
		{"an empty id", MediaType, `{"version":"retryops.dev/batch/v1","records":[{"id":""}]}`, ErrorTypeRequestInvalid},
		{"both text and base64", MediaType, `{"version":"retryops.dev/batch/v1","records":[{"id":"0","value":{"text":"a","base64":"YQ=="}}]}`, ErrorTypeRequestInvalid},
		{"invalid base64", MediaType, `{"version":"retryops.dev/batch/v1","records":[{"id":"0","key":{"base64":"!"}}]}`, ErrorTypeRequestInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(c.body))
			r.Header.Set("Content-Type", c.contentType)
			_, err := ParseRequest(r, 1000)
			var e *Error
			if !errors.As(err, &e) || e.Type != c.errType {
				t.Fatalf("error %v, want type %s", err, c.errType)
			}
		})
	}
	t.Run("a media type without its version parameter is read", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(valid))
		r.Header.Set("Content-Type", "application/vnd.retryops.batch+json")
		req, err := ParseRequest(r, 1000)
		if err != nil || string(req.Records[0].Value()) != "x" || req.Records[0].Key() != nil {
			t.Fatalf("%+v, %v", req, err)
		}
	})
}
