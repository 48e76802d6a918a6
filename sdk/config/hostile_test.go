package config_test

import (
	"strings"
	"testing"

	"github.com/retryops/retry-operator/sdk/config"
)

// TestADuplicateFieldIsRefused: encoding/json keeps the last of two equal keys (or of two keys
// equal but for case) and merges two objects under one key, so a file could show a reviewer one
// value and run another; no writer of this format repeats a key.
func TestADuplicateFieldIsRefused(t *testing.T) {
	for _, tc := range []struct{ name, json, want string }{
		{"a later null drops the policy", `{` + minimal + `, "policy": {"maxAttempts": 1}, "policy": null}`,
			`duplicate field "policy"`},
		{"the version given twice", `{"version": "2.0", ` + minimal + `, "version": "1.0"}`, `duplicate field "version"`},
		{"the version in another case", `{"Version": "2.0", ` + minimal + `, "version": "1.0"}`, `duplicate field "version"`},
		{"a field in another case", `{` + minimal + `, "Kafka": {"clientID": "x"}}`, `duplicate field "Kafka"`},
		{"a nested field", `{` + minimal + `, "delivery": {"maxInFlight": 1, "maxInFlight": 2}}`, `duplicate field "delivery.maxInFlight"`},
		{"a field of a list item", `{` + minimal[:len(minimal)-1] + `, "retries": [{"name": "a.r", "attempts": [2], "name": "b.r"}]}}`,
			`duplicate field "topics.retries[0].name"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.json))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestAValueErrorNamesItsField: encoding/json returns a duration's own error without its field.
func TestAValueErrorNamesItsField(t *testing.T) {
	for _, tc := range []struct{ name, json, want string }{
		{"an overflowing duration", `{` + minimal + `, "drainTimeout": "99999999999h"}`,
			`invalid JSON: drainTimeout: time: invalid duration "99999999999h"`},
		{"a number for a duration", `{` + minimal + `, "group": {"sessionTimeout": 45}}`,
			`invalid JSON: group.sessionTimeout: a duration must be a string such as "1m30s"`},
		{"null for a required duration", `{` + minimal[:len(minimal)-1] + `, "retries": [{"name": "a.r", "attempts": [2], "delay": null}]}}`,
			`invalid JSON: topics.retries[0].delay: time: invalid duration ""`},
		{"a duration deep in the policy", `{` + minimal + `, "policy": {"maxAttempts": 2, "backoff": {"initialDelay": "1s", "maxDelay": "1 s"}}}`,
			`invalid JSON: policy.backoff.maxDelay: time: unknown unit " s"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.json))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("Parse: %v, want %s", err, tc.want)
			}
		})
	}
	if _, err := config.Parse([]byte(`{` + minimal + `, "drainTimeout": null, "policy": {"maxAttempts": 1, "deadline": null}}`)); err != nil {
		t.Errorf("null for an optional duration: %v", err)
	}
}

// TestAnEmptyVariableKeepsTheFile: only a variable set to something overrides the file (a
// Deployment that sets KAFKA_TOPIC_PRIMARY="" keeps the file's source), and one set to blanks
// overrides it with nothing, which validation names.
func TestAnEmptyVariableKeepsTheFile(t *testing.T) {
	path := writeFile(t, t.TempDir(), "c.json", `{`+minimal+`}`)
	c, err := config.Load(path, envOf(map[string]string{config.EnvTopicPrimary: "", config.EnvConsumerGroup: ""}))
	if err != nil || c.Topics.Source != "a" || c.ConsumerGroup != "g" {
		t.Fatalf("Load with empty variables: %v, %+v", err, c)
	}
	_, err = config.Load(path, envOf(map[string]string{config.EnvTopicPrimary: "  "}))
	if err == nil || !strings.Contains(err.Error(), "topics.source (KAFKA_TOPIC_PRIMARY) is required") {
		t.Errorf("Load with a blank KAFKA_TOPIC_PRIMARY: %v", err)
	}
}
