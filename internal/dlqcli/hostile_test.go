package dlqcli

import (
	"context"
	"encoding/csv"
	"strings"
	"testing"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	v1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// hostileLetter is a dead letter every string of which a hostile producer or sink chose: spreadsheet
// formulas (plain, after blanks or a quote, full-width), and terminal escapes (clear screen, window
// title, OSC 52 writing the clipboard, C1 CSI, a bidi override, a forged table row).
func hostileLetter(ns, queue string) dlv1.DeadLetter {
	d := fixture(ns, queue, 1)[0]
	d.State = dlv1.DeadLetterStatus{State: dlv1.StatePending}
	d.Labels[dlv1.LabelState] = string(dlv1.StatePending)
	d.ErrorMessage = "@SUM(1+1)*cmd|' /C calc'!A0\x1b]52;c;cHduZWQ=\x07"
	d.Reason = "=HYPERLINK(\"http://evil.example\",\"x\")"
	d.ErrorType = "\t=1+1"
	d.Pipeline = "+shop/orders\x1b[2J"
	d.ConsumerGroup = "\uff1d1+1"
	d.Original.Topic = " \"-2+3"
	d.Key = &dlv1.Payload{Encoding: dlv1.EncodingText, Data: "-order\x1b]0;pwned\x07\u009b2J\u202egpj.exe", Size: 30}
	d.Value = &dlv1.Payload{Encoding: dlv1.EncodingText, Data: "line 1\x1b[31m red\r\n0/9   1m   Resolved\u2066\x7f", Size: 40}
	d.Headers = []dlv1.Header{{Name: "\x1b]52;c;cHduZWQ=\x07x-evil", Value: "\u009b2J\u0085", Encoding: dlv1.EncodingText}}
	return d
}

// TestCSVNeutralisesFormulas: list -o csv and export -o csv write a cell a spreadsheet would take
// for a formula (=, +, -, @, tab or carriage return first, also after blanks or quotes, also full
// width) with a single quote first, in double quotes; numbers stay numbers.
func TestCSVNeutralisesFormulas(t *testing.T) {
	e := startEnv(t)
	namespaceWithQueue(t, e, "csvhostile", "orders-dlq")
	f := &fakeLetters{letters: []dlv1.DeadLetter{hostileLetter("csvhostile", "orders-dlq")}}
	kubeconfig := f.serve(t, e)
	for _, args := range [][]string{{"list", "orders-dlq", "-o", "csv"}, {"export", "orders-dlq", "-o", "csv"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			g := NewWithT(t)
			r := runPlugin(t, kubeconfig, false, append([]string{"-n", "csvhostile"}, args...)...)
			g.Expect(r.code).To(Equal(ExitOK), r.stderr)
			records, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
			g.Expect(err).NotTo(HaveOccurred(), r.stdout)
			g.Expect(records).To(HaveLen(2))
			row := map[string]string{}
			for i, c := range LetterColumns {
				row[c] = records[1][i]
			}
			g.Expect(row).To(HaveKeyWithValue("errorMessage", "'@SUM(1+1)*cmd|' /C calc'!A0\x1b]52;c;cHduZWQ=\x07"))
			g.Expect(row).To(HaveKeyWithValue("reason", `'=HYPERLINK("http://evil.example","x")`))
			g.Expect(row).To(HaveKeyWithValue("errorType", "'\t=1+1"))
			g.Expect(row).To(HaveKeyWithValue("pipeline", "'+shop/orders\x1b[2J"))
			g.Expect(row).To(HaveKeyWithValue("consumerGroup", "'\uff1d1+1"))
			g.Expect(row).To(HaveKeyWithValue("originalTopic", "' \"-2+3"))
			g.Expect(row).To(HaveKeyWithValue("key", "'-order\x1b]0;pwned\x07\u009b2J\u202egpj.exe"))
			// numbers are left alone
			g.Expect(row).To(HaveKeyWithValue("partition", "0"))
			g.Expect(row).To(HaveKeyWithValue("httpStatus", "503"))
			g.Expect(row).To(HaveKeyWithValue("attempts", "6"))
			// every neutralised cell is quoted in the file itself
			g.Expect(r.stdout).To(ContainSubstring(`,"'@SUM(1+1)*cmd|' /C calc'!A0`))
			g.Expect(r.stdout).To(ContainSubstring(`,"'` + "\uff1d" + `1+1",`))
			for i, cell := range records[1] {
				trimmed := strings.TrimLeft(cell, " \t\r\n\"'")
				if first, _ := utf8.DecodeRuneInString(trimmed); strings.ContainsRune("=+-@\uff1d\uff0b\uff0d\uff20", first) && !strings.HasPrefix(cell, "'") {
					t.Errorf("column %s: %q a spreadsheet takes for a formula", LetterColumns[i], cell)
				}
			}
		})
	}
	t.Run("stats and actions", func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		q := &v1.DeadLetterQueue{}
		g.Expect(e.Client.Get(ctx, client.ObjectKey{Namespace: "csvhostile", Name: "orders-dlq"}, q)).To(Succeed())
		q.Status = v1.DeadLetterQueueStatus{Messages: ptr.To[int64](1), Pending: ptr.To[int64](1),
			Reasons: []v1.NamedCount{{Name: "=1+1", Count: 1}}, ErrorTypes: []v1.NamedCount{{Name: "-5", Count: 1}}}
		g.Expect(e.Client.Status().Update(ctx, q)).To(Succeed())
		r := runPlugin(t, kubeconfig, false, "-n", "csvhostile", "stats", "orders-dlq", "-o", "csv")
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		g.Expect(r.stdout).To(Equal("dimension,name,count\nreason,\"'=1+1\",1\nerror-type,-5,1\n"))
		a := &v1.DeadLetterAction{ObjectMeta: metav1.ObjectMeta{Namespace: "csvhostile", Name: "resolve-1"},
			Spec: v1.DeadLetterActionSpec{Queue: "orders-dlq", Action: v1.DeadLetterResolve, RequestedBy: "alice", Note: "@evil()"}}
		g.Expect(e.Client.Create(ctx, a)).To(Succeed())
		r = runPlugin(t, kubeconfig, false, "-n", "csvhostile", "actions", "-o", "csv")
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		g.Expect(r.stdout).To(ContainSubstring(`,alice,"'@evil()",`))
	})
}
