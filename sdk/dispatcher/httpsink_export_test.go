package dispatcher

import "net/http"

// NewHTTPSinkTransport returns an HTTPSink sending its requests through rt (a test's canned
// answers, read by net/http's own response parser).
func NewHTTPSinkTransport(rt http.RoundTripper, opts ...HTTPSinkOption) *HTTPSink {
	s := NewHTTPSink("http://sink.invalid/", 1, opts...)
	s.rt = rt
	return s
}
