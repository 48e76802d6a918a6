package dlqcli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// -o is checked the same way by every command, before any request: a format the command does not
// print is a usage error naming the ones it does.
func TestOutputFormatsAreCheckedOneWay(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "q", "-o", "xml"}, `-o "xml": want one of table, wide, json, yaml, name, csv`},
		{[]string{"actions", "-o", "go-template"}, `-o "go-template": want one of table, wide, json, yaml, name, csv`},
		{[]string{"stats", "q", "-o", "name"}, `-o "name": want one of table, json, yaml, csv`},
		{[]string{"show", "q", "0/1", "-o", "wide"}, `-o "wide": want one of json, yaml, name`},
		{[]string{"export", "q", "-o", "yaml"}, `-o "yaml": want one of csv, json`},
		{[]string{"export", "q"}, `export needs -o csv or -o json`},
		{[]string{"replay", "q", "-o", "table"}, `-o "table": want one of name, json, yaml`},
		{[]string{"resolve", "q", "0/1", "--note", "n", "-o", "csv"}, `-o "csv": want one of name, json, yaml`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			g := NewWithT(t)
			var out, errOut bytes.Buffer
			o := newOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
			// no cluster: the check comes first
			code := execute(context.Background(), o, append([]string{"--kubeconfig", "/nonexistent"}, tc.args...))
			g.Expect(code).To(Equal(ExitUsage), errOut.String())
			g.Expect(errOut.String()).To(Equal("error: " + tc.want + "\n"))
			g.Expect(out.String()).To(BeEmpty())
		})
	}
}

// Every command's -o comes from cli-runtime's PrintFlags: its help lists the command's formats, and
// the object formats bring --show-managed-fields.
func TestOutputFlagsAreCLIRuntimes(t *testing.T) {
	g := NewWithT(t)
	root := newCommand(newOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}))
	for name, want := range map[string]string{
		"list":    "Output format. One of: (table, wide, json, yaml, name, csv).",
		"actions": "Output format. One of: (table, wide, json, yaml, name, csv).",
		"stats":   "Output format. One of: (table, json, yaml, csv).",
		"show":    "Output format. One of: (json, yaml, name). Default: a description.",
		"export":  "Output format. One of: (csv, json).",
		"replay":  "Output format. One of: (name, json, yaml). Default: a line naming the action.",
	} {
		cmd, _, err := root.Find([]string{name})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cmd.Flags().Lookup("output").Usage).To(Equal(want), name)
		g.Expect(cmd.Flags().Lookup("show-managed-fields") != nil).To(Equal(name != "export"), name)
	}
}
