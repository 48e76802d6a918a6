package dlqcli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// An -o the command does not print is refused the one way, exit code 3 and the one message,
// before any request, on every command. The printers compare o.output as written and know no kyaml,
// so check does too, where cli-runtime's PrintFlags.ToPrinter would lower the case and take kyaml.
func TestEveryBadOutputIsAUsageError(t *testing.T) {
	commands := map[string]struct {
		args    []string
		formats string
	}{
		"list":    {[]string{"list", "q"}, "table, wide, json, yaml, name, csv"},
		"actions": {[]string{"actions"}, "table, wide, json, yaml, name, csv"},
		"stats":   {[]string{"stats", "q"}, "table, json, yaml, csv"},
		"show":    {[]string{"show", "q", "0/1"}, "json, yaml, name"},
		"export":  {[]string{"export", "q"}, "csv, json"},
		"replay":  {[]string{"replay", "q", "--dry-run"}, "name, json, yaml"},
		"resolve": {[]string{"resolve", "q", "0/1", "--note", "n"}, "name, json, yaml"},
		"ignore":  {[]string{"ignore", "q", "0/1", "--note", "n"}, "name, json, yaml"},
		"purge":   {[]string{"purge", "q", "--before", "30d"}, "name, json, yaml"},
	}
	for name, c := range commands {
		for _, bad := range []string{"kyaml", "JSON", "Yaml", "NAME", "xml", "Table", " json"} {
			t.Run(name+" -o "+bad, func(t *testing.T) {
				g := NewWithT(t)
				var out, errOut bytes.Buffer
				o := newOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
				// no cluster: a check made before any request answers; one made after fails on the kubeconfig
				args := append([]string{"--kubeconfig", "/nonexistent"}, c.args...)
				code := execute(context.Background(), o, append(args, "-o", bad))
				g.Expect(errOut.String()).To(Equal(`error: -o "`+bad+`": want one of `+c.formats+"\n"), "exit code %d", code)
				g.Expect(code).To(Equal(ExitUsage))
				g.Expect(out.String()).To(BeEmpty())
			})
		}
	}
}

// On a cluster, "replay -o JSON" and "-o kyaml" create no action: exit 3 before the request.
func TestABadOutputCreatesNoAction(t *testing.T) {
	e := startEnv(t)
	for _, bad := range []string{"kyaml", "JSON"} {
		t.Run(bad, func(t *testing.T) {
			g := NewWithT(t)
			ns := "review-out-" + strings.ToLower(bad)
			namespaceWithQueue(t, e, ns, "orders-dlq")
			r := runPlugin(t, e.Kubeconfig, false, "-n", ns, "replay", "orders-dlq", "--dry-run", "-o", bad)
			actions := &retryv1alpha1.DeadLetterActionList{}
			g.Expect(e.Client.List(context.Background(), actions, client.InNamespace(ns))).To(Succeed())
			var names []string
			for _, a := range actions.Items {
				names = append(names, a.Name)
			}
			g.Expect(names).To(BeEmpty(), "actions created by replay -o %s (exit %d, stdout %q, stderr %q)", bad, r.code, r.stdout, r.stderr)
			g.Expect(r.code).To(Equal(ExitUsage), r.stderr)
		})
	}
}
