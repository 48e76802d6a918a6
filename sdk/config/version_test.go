package config_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/retryops/retry-operator/sdk/config"
)

// minimal is a valid config body without a version, to which the cases add fields.
const minimal = `"consumerGroup": "g", "kafka": {"bootstrapServers": ["k:9092"]}, "topics": {"source": "a", "deadLetter": "a.dlq"}`

func TestTheConfigVersion(t *testing.T) {
	unknown15 := make([]string, 15)
	for i := range unknown15 {
		unknown15[i] = fmt.Sprintf(`"x%02d": 1`, i)
	}
	for _, tc := range []struct {
		name string
		json string
		// want is the exact error, or "" for none.
		want        string
		unsupported bool
	}{
		{name: "absent is 1.0", json: `{` + minimal + `}`},
		{name: "1.0", json: `{"version": "1.0", ` + minimal + `}`},
		{name: "a newer minor whose fields are all known is read", json: `{"version": "1.3", ` + minimal + `}`},
		{name: "a newer minor with fields this module does not know is refused, naming them in file order",
			json: `{"version": "1.3", ` + minimal + `, "delivery": {"maxInFlight": 3, "foo": {"deep": 1}}, "bar": [1]}`,
			want: "config version 1.3 is newer than this module's 1.0 and has fields it does not know: delivery.foo, bar; " +
				"upgrade github.com/retryops/retry-operator/sdk to one that reads 1.3",
			unsupported: true},
		{name: "unknown fields are found in list items and nested objects",
			json: `{"version": "1.1", ` + minimal[:len(minimal)-1] + `, "retries": [{"name": "a.r1", "attempts": [2]}, {"name": "a.r2", "attempts": [3], "delai": "1s"}]},
				"policy": {"maxAttempts": 3, "backoff": {"initialDelay": "1s", "maxDelay": "2s", "jitter": {"mode": "None", "maxx": "1s"}}}}`,
			want: "config version 1.1 is newer than this module's 1.0 and has fields it does not know: topics.retries[1].delai, " +
				"policy.backoff.jitter.maxx; upgrade github.com/retryops/retry-operator/sdk to one that reads 1.1",
			unsupported: true},
		{name: "another major is refused", json: `{"version": "2.0", ` + minimal + `}`,
			want:        "config version 2.0: this module reads 1.x; upgrade github.com/retryops/retry-operator/sdk",
			unsupported: true},
		{name: "another major is refused before its unknown fields", json: `{"version": "2.0", ` + minimal + `, "foo": 1}`,
			want:        "config version 2.0: this module reads 1.x; upgrade github.com/retryops/retry-operator/sdk",
			unsupported: true},
		{name: "an older major is refused", json: `{"version": "0.9", ` + minimal + `}`,
			want:        "config version 0.9: this module reads 1.x; upgrade github.com/retryops/retry-operator/sdk",
			unsupported: true},
		{name: "the same minor with an unknown field is a misspelt field", json: `{"version": "1.0", ` + minimal + `, "delivery": {"maxInFlite": 3}}`,
			want: `unknown field "delivery.maxInFlite": not a field of config version 1.0`},
		{name: "no version with unknown fields are misspelt fields", json: `{"consumerGroupp": "g", "topics": {"dedLetter": "d"}}`,
			want: `unknown fields "consumerGroupp", "topics.dedLetter": not fields of config version 1.0`},
		{name: "at most ten unknown fields are named", json: `{"version": "1.2", ` + strings.Join(unknown15, ", ") + `}`,
			want: "config version 1.2 is newer than this module's 1.0 and has fields it does not know: " +
				"x00, x01, x02, x03, x04, x05, x06, x07, x08, x09 and 5 more; upgrade github.com/retryops/retry-operator/sdk to one that reads 1.2",
			unsupported: true},
		{name: "a hostile field name is quoted and cut", json: `{"` + strings.Repeat("a", 200) + `\n": 1}`,
			want: `unknown field "` + strings.Repeat("a", 64) + `...": not a field of config version 1.0`},
		{name: "a field repeated is named once", json: `{"foo": 1, "foo": 2}`,
			want: `unknown field "foo": not a field of config version 1.0`},
		{name: "a field name in another case is the field, as encoding/json matches it", json: `{"Version": "1.0", "ConsumerGroup": "g"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.json))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "":
				return
			case err == nil:
				t.Fatalf("read; want the error %q", tc.want)
			case err.Error() != tc.want:
				t.Errorf("error\n%s\nwant\n%s", err, tc.want)
			}
			if got := errors.Is(err, config.ErrUnsupportedVersion); got != tc.unsupported {
				t.Errorf("errors.Is(err, ErrUnsupportedVersion) = %v", got)
			}
		})
	}
}

func TestAMalformedVersionIsAClearError(t *testing.T) {
	for _, v := range []string{`"1"`, `"v1.0"`, `"1.x"`, `"1.0.0"`, `"01.0"`, `"1.00"`, `" 1.0"`, `""`, `"-1.0"`, `"+1.0"`,
		`"1.99999999999999999999"`, `"99999999999999999999.0"`, `1.0`, `{"major": 1}`} {
		t.Run(v, func(t *testing.T) {
			_, err := config.Parse([]byte(`{"version": ` + v + `, ` + minimal + `}`))
			if err == nil {
				t.Fatal("read")
			}
			if !strings.HasPrefix(err.Error(), "config version ") || !strings.Contains(err.Error(), `a major.minor version such as "1.0"`) {
				t.Errorf("unclear error: %v", err)
			}
			if !errors.Is(err, config.ErrUnsupportedVersion) {
				t.Errorf("not ErrUnsupportedVersion: %v", err)
			}
		})
	}
}

func TestTheConfigFileIsBounded(t *testing.T) {
	big := []byte(`{` + minimal + `, "pipeline": {"name": "` + strings.Repeat("n", config.MaxConfigBytes) + `"}}`)
	want := fmt.Sprintf("the config is %d bytes; at most %d", len(big), config.MaxConfigBytes)
	if _, err := config.Parse(big); err == nil || err.Error() != want {
		t.Errorf("Parse: %v, want %q", err, want)
	}
	path := writeFile(t, t.TempDir(), "big.json", string(big))
	_, err := config.Load(path, envOf(nil))
	if want := fmt.Sprintf("config file %s is larger than %d bytes", path, config.MaxConfigBytes); err == nil || err.Error() != want {
		t.Errorf("Load: %v, want %q", err, want)
	}
}

func TestValidateRefusesAVersionItCannotRun(t *testing.T) {
	for v, want := range map[string]string{
		"2.0": "version 2.0: this module reads 1.x",
		"1":   `version "1" is not a major.minor version such as "1.0"`,
	} {
		c, err := config.Parse([]byte(`{` + minimal + `}`))
		if err != nil {
			t.Fatal(err)
		}
		c.Version = v
		c.Default()
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("version %s: %v, want %q", v, err, want)
		}
	}
}
