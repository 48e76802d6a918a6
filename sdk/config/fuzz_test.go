package config_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/retryops/retry-operator/sdk/config"
)

// FuzzParse: Parse never panics on a hostile file; what it reads it reads again from its own
// encoding; and its unknown-field scan agrees with encoding/json's strict decoding (a file the
// strict decoder reads is refused, if at all, for its version or a duplicate field only, and a file
// Parse reads the strict decoder reads too).
func FuzzParse(f *testing.F) {
	f.Add([]byte(fileJSON))
	f.Add([]byte(`{"version": "1.3", ` + minimal + `, "delivery": {"foo": [{"x": 1}]}, "bar": 1}`))
	f.Add([]byte(`{"Version": "1.0", "TOPICS": {"Retries": [{"Attempts": [2], "nope": {}}]}}`))
	f.Add([]byte(`{"version": 2, "policy": {"backoff": {"initialDelay": 5}}} {}`))
	f.Add([]byte(`[[[[[[[[{"a":` + strings.Repeat("[", 100) + `]]`))
	f.Add([]byte(`{"topics": {"retries": {"name": "x"}}, "kafka": [], "delivery": null}`))
	f.Add([]byte(`{"Policy": {"maxAttempts": 1}, "policy": null, "drainTimeout": "1 s", "topics": {"retries": [{"delay": null}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data)
		strictErr := strictDecode(data)
		switch {
		case err == nil && strictErr != nil:
			t.Fatalf("Parse read a file encoding/json refuses: %v", strictErr)
		case err != nil && strictErr == nil && !errors.Is(err, config.ErrUnsupportedVersion) && !strings.Contains(err.Error(), "duplicate field"):
			t.Fatalf("Parse refused a file encoding/json reads, not for its version nor a duplicate field: %v", err)
		case err != nil:
			return
		}
		once, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		again, err := config.Parse(once)
		if err != nil {
			t.Fatalf("Parse refuses its own encoding %s: %v", once, err)
		}
		twice, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(once, twice) {
			t.Fatalf("encoding changed:\n%s\n%s", once, twice)
		}
	})
}

func strictDecode(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&config.Config{}); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}
