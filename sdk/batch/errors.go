package batch

import (
	"fmt"
	"net/http"
)

// Error types of the failures this package reports, for a whole batch (ParseResponse's Error) or
// for one record (a Result's ErrorType).
const (
	// ErrorTypeResponseTooLarge: the response body is larger than the limit; the batch fails.
	ErrorTypeResponseTooLarge = "BatchResponseTooLarge"
	// ErrorTypeResponseInvalid: the response is not a document of this version; the batch fails.
	// A result with a status other than success or failure is a failure of this type too.
	ErrorTypeResponseInvalid = "BatchResponseInvalid"
	// ErrorTypeResultMissing: the response has no result for a record. ParseResponse leaves it out
	// of its map; the caller makes it a failure of this type (classified as an HTTP 502 would be).
	ErrorTypeResultMissing = "BatchResultMissing"
	// ErrorTypeResultConflict: the response has several results for a record that disagree.
	ErrorTypeResultConflict = "BatchResultConflict"
	// ErrorTypeInvalidStatus: a result's httpStatus is outside 100-599, or not 2xx on a success, or
	// 2xx on a failure; it is dropped and the record fails.
	ErrorTypeInvalidStatus = "InvalidStatus"

	// ErrorTypeNotSupported: the sink answered a batch request 415, it does not take batch
	// documents. Every record of the batch is retried through the tiers whatever the policy says
	// of a 415, so that records wait for the sink (or the pipeline's delivery.batch) to be fixed,
	// up to the policy's maxAttempts and deadline, instead of being dead-lettered as if each were
	// refused.
	ErrorTypeNotSupported = "BatchNotSupported"

	// ErrorTypeRequestTooLarge: ParseRequest read a body larger than its limit (answer 413).
	ErrorTypeRequestTooLarge = "BatchRequestTooLarge"
	// ErrorTypeUnsupportedMediaType: the request is not of MediaType (answer 415).
	ErrorTypeUnsupportedMediaType = "UnsupportedMediaType"
	// ErrorTypeRequestInvalid: the request is not a document of this version (answer 400).
	ErrorTypeRequestInvalid = "BatchRequestInvalid"
)

// Error is a failure of a whole document, request or response.
type Error struct {
	// Type is one of the ErrorType constants.
	Type string
	// Message says what was wrong, for a person.
	Message string
}

// Error reads "Type: Message".
func (e *Error) Error() string { return e.Type + ": " + e.Message }

// StatusCode is the HTTP status a sink answers a request that failed to parse with.
func (e *Error) StatusCode() int {
	switch e.Type {
	case ErrorTypeRequestTooLarge, ErrorTypeResponseTooLarge:
		return http.StatusRequestEntityTooLarge
	case ErrorTypeUnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	}
	return http.StatusBadRequest
}

func errorf(typ, format string, args ...any) *Error {
	return &Error{Type: typ, Message: fmt.Sprintf(format, args...)}
}
