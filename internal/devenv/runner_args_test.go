package devenv

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestExpandArgsAsAKubelet(t *testing.T) {
	env := []string{"DISPATCHER_IMAGE=ghcr.io/retryops/retry-dispatcher:dev", "EMPTY="}
	for _, tc := range []struct{ name, arg, want string }{
		{"a defined variable is expanded", "--dispatcher-image=$(DISPATCHER_IMAGE)", "--dispatcher-image=ghcr.io/retryops/retry-dispatcher:dev"},
		{"an empty one too", "--x=$(EMPTY)", "--x="},
		{"an undefined one stays as it is", "--x=$(UNDEFINED)", "--x=$(UNDEFINED)"},
		{"$$ escapes a reference", "--x=$$(DISPATCHER_IMAGE)", "--x=$(DISPATCHER_IMAGE)"},
		{"a lone $ is kept", "--price=$5", "--price=$5"},
		{"no reference, no change", "--leader-elect", "--leader-elect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(expandArgs([]string{tc.arg}, env)).To(Equal([]string{tc.want}))
		})
	}
}

func TestSetListenFlagsReplacesOrAddsEachFlag(t *testing.T) {
	ports := map[string]string{"health-probe-bind-address": "1001", "metrics-bind-address": "1002", "deadletters-api-bind-address": "1003"}
	for _, tc := range []struct {
		name       string
		args, want []string
	}{
		{"values replaced in place, missing flags added in name order",
			[]string{"--leader-elect", "--metrics-bind-address=:8443", "--health-probe-bind-address=:8081", "--zap-log-level=debug"},
			[]string{"--leader-elect", "--metrics-bind-address=127.0.0.1:1002", "--health-probe-bind-address=127.0.0.1:1001", "--zap-log-level=debug",
				"--deadletters-api-bind-address=127.0.0.1:1003"}},
		{"a value given as the next argument goes with its flag",
			[]string{"-metrics-bind-address", ":8443", "--other", "x"},
			[]string{"--metrics-bind-address=127.0.0.1:1002", "--other", "x",
				"--deadletters-api-bind-address=127.0.0.1:1003", "--health-probe-bind-address=127.0.0.1:1001"}},
		{"a positional argument that looks like a flag name is not one",
			[]string{"metrics-bind-address=:1"},
			[]string{"metrics-bind-address=:1", "--deadletters-api-bind-address=127.0.0.1:1003",
				"--health-probe-bind-address=127.0.0.1:1001", "--metrics-bind-address=127.0.0.1:1002"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(setListenFlags(tc.args, ports)).To(Equal(tc.want))
		})
	}
}
