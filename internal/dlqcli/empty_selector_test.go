package dlqcli

import (
	"context"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// A selector flag given an empty value (--pipeline "$PIPELINE" with the variable unset) selects
// nothing rather than leaving the filter out: on a queue shared by several pipelines, resolving or
// purging every pipeline's dead letters because a variable was empty is the worst reading of it. The
// command is refused before it needs a cluster.
func TestAnEmptySelectorValueIsAUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"resolve", "orders-dlq", "--pipeline", "", "--note", "x"},
		{"ignore", "orders-dlq", "--pipeline=", "--note", "x"},
		{"replay", "orders-dlq", "--pipeline", "billing,"},
		{"purge", "orders-dlq", "--before", "30d", "--pipeline", ""},
		{"resolve", "orders-dlq", "--reason", "", "--note", "x"},
		{"resolve", "orders-dlq", "--error-type", "", "--note", "x"},
		{"list", "orders-dlq", "--pipeline", ""},
	} {
		var out, errOut strings.Builder
		o := newOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
		code := execute(context.Background(), o, append([]string{"--kubeconfig", t.TempDir() + "/none"}, args...))
		if code != ExitUsage || !strings.Contains(errOut.String(), "empty") {
			t.Errorf("kubectl dlq %s: exit %d, stderr %q; want %d and an error about an empty value", strings.Join(args, " "), code, errOut.String(), ExitUsage)
		}
	}
}
