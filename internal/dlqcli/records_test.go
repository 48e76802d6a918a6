package dlqcli

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// PARTITION/OFFSET arguments are a usage error (exit 3, the one message) before any request,
// as show checks them (in Args), and so is a list the API server would refuse (a record twice:
// records is a listType=set; more than its 1000 items), and purge without --before: no cluster is
// needed for a typo.
func TestRecordArgumentsAreCheckedFirst(t *testing.T) {
	many := []string{"replay", "q"}
	for i := range 1001 {
		many = append(many, "0/"+strconv.Itoa(i))
	}
	for _, tc := range []struct {
		name string
		args []string
		// want is the message; "" when any message with exit 3 will do.
		want string
	}{
		{"show, a list in one argument (cleared)", []string{"show", "q", "0/1,0/1"}, `"0/1,0/1" is not a dead letter: want PARTITION/OFFSET, for example 0/42`},
		{"show, past int64 (cleared)", []string{"show", "q", "0/99999999999999999999"}, `"0/99999999999999999999" is not a dead letter: want PARTITION/OFFSET, for example 0/42`},
		{"replay, not a number", []string{"replay", "q", "0/x"}, `"0/x" is not a dead letter: want PARTITION/OFFSET, for example 0/42`},
		{"resolve, a list in one argument", []string{"resolve", "q", "--note", "n", "0/1,0/1"}, `"0/1,0/1" is not a dead letter: want PARTITION/OFFSET, for example 0/42`},
		{"ignore, a negative partition", []string{"ignore", "q", "--note", "n", "--", "-1/0"}, `"-1/0" is not a dead letter: want PARTITION/OFFSET, for example 0/42`},
		{"replay, past int64", []string{"replay", "q", "0/99999999999999999999"}, `"0/99999999999999999999" is not a dead letter: want PARTITION/OFFSET, for example 0/42`},
		{"replay, the same dead letter twice", []string{"replay", "q", "0/1", "0/1"}, ""},
		{"replay, 1001 dead letters", many, ""},
		{"purge without --before", []string{"purge", "q"}, "purge needs --before (for example --before 30d): only dead letters older than that are deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var out, errOut bytes.Buffer
			o := newOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
			code := execute(context.Background(), o, append([]string{"--kubeconfig", "/nonexistent"}, tc.args...))
			if tc.want != "" {
				g.Expect(errOut.String()).To(Equal("error: "+tc.want+"\n"), "exit code %d", code)
			}
			g.Expect(code).To(Equal(ExitUsage), errOut.String())
		})
	}
}

// A huge argument is refused with a message of bounded size, as dlqapi's cut bounds the values it
// echoes.
func TestAHugeRecordArgumentHasABoundedMessage(t *testing.T) {
	g := NewWithT(t)
	var out, errOut bytes.Buffer
	o := newOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	code := execute(context.Background(), o, []string{"--kubeconfig", "/nonexistent", "show", "q", strings.Repeat("9", 1<<20) + "/0"})
	g.Expect(code).To(Equal(ExitUsage))
	g.Expect(errOut.Len()).To(BeNumerically("<", 512), "a message of %d bytes", errOut.Len())
}

// On a cluster, the same dead letter twice is the plugin's usage error, not the API server's
// "Duplicate value" (exit 1).
func TestDuplicateRecordsOnACluster(t *testing.T) {
	g := NewWithT(t)
	e := startEnv(t)
	namespaceWithQueue(t, e, "review-dup", "orders-dlq")
	r := runPlugin(t, e.Kubeconfig, false, "-n", "review-dup", "replay", "orders-dlq", "--dry-run", "0/1", "0/1")
	g.Expect(r.code).To(Equal(ExitUsage), r.stderr)
}
