package batch_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/retryops/retry-operator/sdk/batch"
)

// A sink author's handler: parse the batch, process the records in order, answer a result each.
func Example() {
	handler := func(w http.ResponseWriter, r *http.Request) {
		req, err := batch.ParseRequest(r, 8<<20)
		if err != nil {
			var e *batch.Error
			errors.As(err, &e)
			http.Error(w, err.Error(), e.StatusCode())
			return
		}
		results := make([]batch.Result, 0, len(req.Records))
		for _, rec := range req.Records {
			if len(rec.Value()) == 0 {
				results = append(results, batch.Failure(rec.ID, http.StatusUnprocessableEntity, "EmptyValue", "nothing to store"))
				continue
			}
			// Store rec.Value() under rec.IdempotencyKey here.
			results = append(results, batch.Success(rec.ID))
		}
		_ = batch.WriteResults(w, results)
	}

	body := `{"version":"retryops.dev/batch/v1","records":[
		{"id":"0","idempotencyKey":"orders/0/1","attempt":1,"topic":"orders","partition":0,"offset":1,
		 "timestamp":"2025-01-02T03:04:05.000Z","key":null,"value":{"text":"hello"}},
		{"id":"1","idempotencyKey":"orders/0/2","attempt":1,"topic":"orders","partition":0,"offset":2,
		 "timestamp":"2025-01-02T03:04:06.000Z","key":null,"value":{"text":""}}]}`
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	req.Header.Set("Content-Type", batch.MediaType)
	rec := httptest.NewRecorder()
	handler(rec, req)
	fmt.Println(rec.Code, strings.TrimSpace(rec.Body.String()))

	results, err := batch.ParseResponse(bytes.NewReader(rec.Body.Bytes()), []string{"0", "1"}, batch.ResponseLimit(2))
	fmt.Println(results["0"].Status, results["1"].Status, results["1"].ErrorType, err)
	// Output:
	// 200 {"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"success"},{"id":"1","status":"failure","httpStatus":422,"errorType":"EmptyValue","message":"nothing to store"}]}
	// success failure EmptyValue <nil>
}
