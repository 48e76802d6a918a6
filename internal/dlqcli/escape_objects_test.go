package dlqcli

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/termsafe"
)

// hostile holds what a terminal acts on: ESC (an OSC title and a CSI), a C1 CSI, DEL, a bidi
// override and a line separator.
const hostile = "\x1b]0;owned\x07\x1b[2J\u009b31m\x7f\u202e\u2028"

// -o json, yaml and name print nothing a terminal acts on, on a terminal, whatever a
// producer (a dead letter's fields) or a co-tenant (an action's note, a field manager's name, shown
// with --show-managed-fields) wrote.
func TestObjectFormatsEscapeOnATerminal(t *testing.T) {
	d := &dlv1.DeadLetter{ObjectMeta: metav1.ObjectMeta{Name: "q.0.1", Namespace: "shop",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: hostile}}},
		Pipeline: hostile, Reason: hostile, ErrorMessage: hostile, Headers: []dlv1.Header{{Name: hostile, Value: hostile}}}
	a := &retryv1alpha1.DeadLetterActionList{Items: []retryv1alpha1.DeadLetterAction{{ObjectMeta: metav1.ObjectMeta{Name: "replay-q-x", Namespace: "shop",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: hostile}}}, Spec: retryv1alpha1.DeadLetterActionSpec{Note: hostile, RequestedBy: hostile}}}}
	for _, format := range []string{outJSON, outYAML, outName} {
		for _, showManaged := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s managed fields %v", format, showManaged), func(t *testing.T) {
				g := NewWithT(t)
				var out bytes.Buffer
				o := newOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &bytes.Buffer{}})
				o.terminal = func(io.Writer) bool { return true }
				o.output = format
				o.print = &genericclioptions.PrintFlags{JSONYamlPrintFlags: &genericclioptions.JSONYamlPrintFlags{ShowManagedFields: showManaged}}
				g.Expect(printObject(o, d.DeepCopy())).To(Succeed())
				g.Expect(printObject(o, a.DeepCopy())).To(Succeed())
				for _, r := range out.String() {
					g.Expect(r == '\n' || r == '\t' || !termsafe.Unsafe(r)).To(BeTrue(), "-o %s printed %U:\n%s", format, r, out.String())
				}
				if format != outName {
					g.Expect(strings.Contains(out.String(), "owned")).To(BeTrue(), "the hostile text is shown, escaped")
					g.Expect(strings.Contains(out.String(), "managedFields")).To(Equal(showManaged))
				}
			})
		}
	}
}
