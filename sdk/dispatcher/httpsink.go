package dispatcher

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/retry"
)

// HTTPSink delivers each record as an HTTP POST of its value to one URL. What it sends and how it
// reads the answer is the HTTP sink contract, docs/http-contract.md.
type HTTPSink struct {
	url   string
	rt    http.RoundTripper
	clock clock.PassiveClock // the now a Retry-After date is counted from
}

// HTTPSinkOption configures an HTTPSink.
type HTTPSinkOption func(*HTTPSink)

// WithSinkClock makes the sink read the time from c, the engine's clock when it has one: a
// Retry-After given as a date is a wait from now. The default is the real clock.
func WithSinkClock(c clock.PassiveClock) HTTPSinkOption { return func(s *HTTPSink) { s.clock = c } }

// maxResponseHeaderBytes bounds the header block of a sink's answer (net/http's default is 10 MiB,
// held per delivery in flight): a larger one is a transport failure (ConnectionError), classified by
// the policy. What the dispatcher reads of it, the status, Retry-After and Retryops-Error-Type, is
// far smaller.
const maxResponseHeaderBytes = 64 << 10

// NewHTTPSink returns a sink POSTing to url, keeping up to maxConns idle connections.
func NewHTTPSink(url string, maxConns int, opts ...HTTPSinkOption) *HTTPSink {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxResponseHeaderBytes = maxResponseHeaderBytes
	tr.MaxIdleConns = max(2*maxConns, 100)
	tr.MaxIdleConnsPerHost = max(maxConns, 2)
	tr.IdleConnTimeout = 90 * time.Second
	s := &HTTPSink{url: url, rt: tr, clock: clock.RealClock{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

var drainBufs = sync.Pool{New: func() any { b := make([]byte, 4096); return &b }}

// readBody reads up to limit bytes of body into a pooled buffer, calling keep with the first
// keepMax bytes read (nil keep discards), so that the connection can be reused.
func readBody(body io.Reader, limit int, keepMax int, keep *[]byte) {
	bp := drainBufs.Get().(*[]byte)
	defer drainBufs.Put(bp)
	buf := *bp
	total := 0
	for total < limit {
		n, err := body.Read(buf[:min(len(buf), limit-total)])
		if keep != nil && len(*keep) < keepMax && n > 0 {
			*keep = append(*keep, buf[:min(n, keepMax-len(*keep))]...)
		}
		total += n
		if err != nil {
			return
		}
	}
}

const (
	maxMessageRead = headers.MaxErrorMessageBytes
	maxDrain       = 64 << 10
)

// Deliver implements Handler.
func (s *HTTPSink) Deliver(ctx context.Context, d *Delivery) Result {
	r := d.Record
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(r.Value))
	if err != nil {
		return Result{Undeliverable: true, Outcome: retry.Outcome{ErrorType: headers.ErrorTypeUndeliverable, Message: err.Error()}}
	}
	req.Header = make(http.Header, 14+len(r.Headers))
	// One backing array for the fixed headers' values saves an allocation per header.
	vals := make([]string, 0, 14)
	set := func(k, v string) {
		vals = append(vals, v)
		req.Header[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	h := req.Header
	contentType := "application/octet-stream"
	var b64 []string
	for _, kh := range r.Headers {
		if strings.EqualFold(kh.Key, "content-type") && headers.IsPlainHeaderValue(kh.Value) && len(kh.Value) > 0 {
			contentType = string(kh.Value)
		}
		name := headers.HeaderName(kh.Key)
		if headers.IsPlainHeaderValue(kh.Value) {
			h[name] = append(h[name], string(kh.Value))
		} else {
			h[name] = append(h[name], base64.StdEncoding.EncodeToString(kh.Value))
			b64 = append(b64, name[len(headers.HTTPKafkaHeaderPrefix):])
		}
	}
	if len(b64) > 0 {
		set(headers.HTTPKafkaBase64Headers, strings.Join(b64, ","))
	}
	set("Content-Type", contentType)
	if r.Key != nil {
		if headers.IsPlainHeaderValue(r.Key) {
			set(headers.HTTPKafkaKey, string(r.Key))
		} else {
			set(headers.HTTPKafkaKey, base64.StdEncoding.EncodeToString(r.Key))
			set(headers.HTTPKafkaKeyEncoding, "base64")
		}
	}
	set(headers.HTTPIdempotencyKey, d.IdempotencyKey)
	set(headers.HTTPRetryAttempt, strconv.Itoa(int(d.Attempt)))
	set(headers.HTTPKafkaTopic, r.Topic)
	set(headers.HTTPKafkaPartition, strconv.Itoa(int(r.Partition)))
	set(headers.HTTPKafkaOffset, strconv.FormatInt(r.Offset, 10))
	set(headers.HTTPKafkaTimestamp, r.Timestamp.UTC().Format(time.RFC3339Nano))
	if d.ReplayOf != "" {
		set(headers.HTTPReplayOf, d.ReplayOf)
		set(headers.HTTPReplayCount, strconv.Itoa(d.ReplayCount))
	}
	c := d.Consumed
	if c == r {
		set(headers.HTTPDeliveredFrom, d.IdempotencyKey)
	} else {
		set(headers.HTTPDeliveredFrom, headers.IdempotencyKey(c.Topic, c.Partition, c.Offset))
	}

	noReplay(req, len(r.Value))
	resp, err := s.rt.RoundTrip(req)
	if err != nil {
		return transportResult(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		readBody(resp.Body, maxDrain, 0, nil)
		return Result{Success: true}
	}
	return failureResult(s.statusOutcome(resp))
}

// transportResult is the Result of a request that got no answer.
func transportResult(ctx context.Context, err error) Result {
	return Result{Outcome: retry.Outcome{Transport: transportError(ctx, err), Message: err.Error()}}
}

// statusOutcome is the Outcome of a non-2xx answer, whose body it reads for the message.
func (s *HTTPSink) statusOutcome(resp *http.Response) retry.Outcome {
	var body []byte
	readBody(resp.Body, maxDrain, maxMessageKeep, &body)
	return retry.Outcome{
		HTTPStatus: resp.StatusCode,
		ErrorType:  failureErrorType(resp.Header.Get(headers.HTTPErrorType)),
		Message:    failureMessage(string(body), resp.StatusCode),
		RetryAfter: parseRetryAfter(resp.Header.Get(headers.HTTPRetryAfter), s.clock.Now()),
	}
}

// failureResult is the Result of a failure with o's status: a 413 or a 415 says the record itself
// can never be processed.
func failureResult(o retry.Outcome) Result {
	switch o.HTTPStatus {
	case http.StatusRequestEntityTooLarge:
		o.ErrorType = headers.ErrorTypePayloadTooLarge
		return Result{Undeliverable: true, Outcome: o}
	case http.StatusUnsupportedMediaType:
		o.ErrorType = headers.ErrorTypeUnsupportedMediaType
		return Result{Undeliverable: true, Outcome: o}
	}
	return Result{Outcome: o}
}

// noReplay makes a request that net/http will not send again by itself. net/http re-sends a
// request that failed on a reused connection after being written (the server closed it without
// answering) when the request is "replayable" (Request.isReplayable): its body can be had again
// (GetBody, or no body at all) and its method is idempotent or it carries Idempotency-Key, as
// every delivery does. Such a silent second copy is a duplicate the policy never saw; the failure
// must come back as a transport failure instead. So the body cannot be had again (no GetBody);
// an empty value has no body to withhold (and a body of unknown length would be sent chunked), so
// its Idempotency-Key goes under the lower-case name, which net/http's rule does not look up
// (header names are case-insensitive; HTTP/2 sends them lower-case anyway). A request that was
// never written is still retried by net/http: that sends no duplicate.
func noReplay(req *http.Request, n int) {
	req.GetBody = nil
	if n == 0 {
		if v, ok := req.Header[headers.HTTPIdempotencyKey]; ok {
			delete(req.Header, headers.HTTPIdempotencyKey)
			req.Header[strings.ToLower(headers.HTTPIdempotencyKey)] = v
		}
	}
}

// maxRetryAfter bounds what parseRetryAfter returns (the policy's retryAfter.maxDelay is lower).
const maxRetryAfter = 365 * 24 * time.Hour

// parseRetryAfter reads a Retry-After value, delay-seconds or an HTTP date, as a delay in
// 0..maxRetryAfter: 0 when it is absent, invalid (NaN included) or not in the future, and
// maxRetryAfter for any longer wait, however long (the policy's retryAfter.maxDelay then caps it).
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		switch {
		case !(secs > 0): // NaN too
			return 0
		case secs >= maxRetryAfter.Seconds():
			return maxRetryAfter
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, maxRetryAfter)
		}
	}
	return 0
}

// transportError classifies a request that got no answer.
func transportError(ctx context.Context, err error) retry.TransportError {
	var (
		netErr  net.Error
		dnsErr  *net.DNSError
		unkAuth x509.UnknownAuthorityError
		hostErr x509.HostnameError
		certErr x509.CertificateInvalidError
		recErr  tls.RecordHeaderError
		alert   tls.AlertError
		verify  *tls.CertificateVerificationError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded:
		return retry.TransportTimeout
	case errors.As(err, &dnsErr):
		return retry.TransportDNS
	case errors.As(err, &unkAuth), errors.As(err, &hostErr), errors.As(err, &certErr),
		errors.As(err, &recErr), errors.As(err, &alert), errors.As(err, &verify):
		return retry.TransportTLS
	case errors.Is(err, syscall.ECONNREFUSED):
		return retry.TransportConnectionRefused
	case errors.As(err, &netErr) && netErr.Timeout():
		return retry.TransportTimeout
	default:
		return retry.TransportConnectionReset
	}
}
