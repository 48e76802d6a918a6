// Package batch is the wire contract of batch delivery: the request a dispatcher POSTs with several
// records and the response in which the sink gives a result per record. The dispatcher encodes
// requests and parses responses; a sink author written in Go parses requests and writes results
// with the same package. It imports the standard library only.
//
// # Request
//
// One POST with Content-Type [MediaType] and the body
//
//	{"version": "retryops.dev/batch/v1", "records": [
//	  {"id": "k3x9.0", "idempotencyKey": "orders/3/1042", "attempt": 1,
//	   "topic": "orders", "partition": 3, "offset": 1042, "timestamp": "2025-01-02T03:04:05.678Z",
//	   "deliveredFrom": "orders/3/1042",
//	   "key": {"text": "customer-7"}, "value": {"base64": "AAEC"},
//	   "headers": [{"key": "trace", "text": "abc"}]}
//	]}
//
// A record's id is opaque, unique in the request and not reused by another request (the dispatcher
// writes "<request>.<index>"): the sink echoes it, so an answer to another request acknowledges
// nothing. Its topic, partition, offset and
// timestamp are the ORIGINAL coordinates, as a single delivery's headers give them; deliveredFrom
// is "<topic>/<partition>/<offset>" of the record consumed (a retry tier's record on a retry), as
// a single delivery's Retryops-Delivered-From header gives it. A key, a value or
// a header value is {"text": ...} when it is valid UTF-8, else {"base64": ...}; a key or value that
// is absent is null. In Ordered mode the sink must process the records in list order.
//
// # Response
//
// A 2xx answer with the body
//
//	{"version": "retryops.dev/batch/v1", "results": [
//	  {"id": "k3x9.0", "status": "success"},
//	  {"id": "k3x9.1", "status": "failure", "httpStatus": 503, "errorType": "Throttled",
//	   "message": "slow down", "retryAfter": 30}
//	]}
//
// retryAfter is seconds (a number) or a Go duration string ("1m30s"). A failure is classified by the
// pipeline's policy as a single delivery's answer with that status, error type and message would be.
//
// A record the response does not mention is a FAILURE ([ErrorTypeResultMissing]): a truncated or
// buggy response never acknowledges a record. Hostile answers are bounded and never acknowledge a
// record the sink did not accept (see [ParseResponse]). A non-2xx answer, a timeout or a broken
// connection applies to every record of the batch, as it would to each alone.
//
// # Versions
//
// Fields may be added within v1; a reader ignores fields it does not know. A change a v1 reader
// would misread takes a new major version, which a v1 parser refuses with an [Error].
package batch

const (
	// Version is the version of the request and response documents.
	Version = "retryops.dev/batch/v1"
	// MediaType is the Content-Type of a request and of a response.
	MediaType = "application/vnd.retryops.batch+json; version=1"
	// mediaTypeBase is MediaType without its parameters.
	mediaTypeBase = "application/vnd.retryops.batch+json"
	// mediaVersion is MediaType's version parameter.
	mediaVersion = "1"
)

// ResponseLimit is the largest response body the dispatcher reads for a batch of n records: 1 MiB
// plus 4 KiB per record (a result's error type and message fit in that).
func ResponseLimit(n int) int64 { return 1<<20 + 4<<10*int64(n) }
