package dlqcli

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
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

// unsafeRunes are what a terminal acts on: C0 controls other than newline and tab, DEL, C1
// controls, and the bidi controls that reorder what is shown.
func unsafeRunes(s string) []string {
	var out []string
	for _, r := range s {
		if r != '\n' && r != '\t' && (r < 0x20 || (r >= 0x7f && r <= 0x9f) || bidi(r)) {
			out = append(out, fmt.Sprintf("U+%04X", r))
		}
	}
	return out
}

func bidi(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
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
			g.Expect(row).To(HaveKeyWithValue("errorType", "'\t'=1+1"))
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
		q := &retryv1alpha1.DeadLetterQueue{}
		g.Expect(e.Client.Get(ctx, client.ObjectKey{Namespace: "csvhostile", Name: "orders-dlq"}, q)).To(Succeed())
		q.Status = retryv1alpha1.DeadLetterQueueStatus{Messages: ptr.To[int64](1), Pending: ptr.To[int64](1),
			Reasons: []retryv1alpha1.NamedCount{{Name: "=1+1", Count: 1}}, ErrorTypes: []retryv1alpha1.NamedCount{{Name: "-5", Count: 1}}}
		g.Expect(e.Client.Status().Update(ctx, q)).To(Succeed())
		r := runPlugin(t, kubeconfig, false, "-n", "csvhostile", "stats", "orders-dlq", "-o", "csv")
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		g.Expect(r.stdout).To(Equal("dimension,name,count\nreason,\"'=1+1\",1\nerror-type,-5,1\n"))
		a := &retryv1alpha1.DeadLetterAction{ObjectMeta: metav1.ObjectMeta{Namespace: "csvhostile", Name: "resolve-1"},
			Spec: retryv1alpha1.DeadLetterActionSpec{Queue: "orders-dlq", Action: retryv1alpha1.DeadLetterResolve, RequestedBy: "alice", Note: "@evil()"}}
		g.Expect(e.Client.Create(ctx, a)).To(Succeed())
		r = runPlugin(t, kubeconfig, false, "-n", "csvhostile", "actions", "-o", "csv")
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		g.Expect(r.stdout).To(ContainSubstring(`,alice,"'@evil()",`))
	})
}

// TestTerminalOutputIsEscaped: what list, show, stats, actions and errors print for a person has
// none of the hostile letter's escapes, C1 controls or bidi overrides, shown instead as \x1b,
// \u009b, \u202e; -o json escapes them as JSON does (the same data), and -o yaml prints (before:
// "yaml: control characters are not allowed") with them escaped on a terminal.
func TestTerminalOutputIsEscaped(t *testing.T) {
	e := startEnv(t)
	namespaceWithQueue(t, e, "termhostile", "orders-dlq")
	d := hostileLetter("termhostile", "orders-dlq")
	f := &fakeLetters{letters: []dlv1.DeadLetter{d}}
	kubeconfig := f.serve(t, e)
	run := func(t *testing.T, terminal bool, args ...string) result {
		t.Helper()
		return <-startPlugin(t, kubeconfig, testNow, terminal, &syncBuffer{}, append([]string{"-n", "termhostile"}, args...)...)
	}
	for _, args := range [][]string{{"list", "orders-dlq"}, {"list", "orders-dlq", "-o", "wide"}, {"show", "orders-dlq", "0/0"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			g := NewWithT(t)
			r := run(t, false, args...)
			g.Expect(r.code).To(Equal(ExitOK), r.stderr)
			g.Expect(unsafeRunes(r.stdout)).To(BeEmpty(), "printed:\n%s", r.stdout)
			g.Expect(r.stdout).To(ContainSubstring(`-order\x1b]0;pwned\x07\u009b2J\u202egpj`))
			if args[0] == "show" {
				g.Expect(r.stdout).To(ContainSubstring("  \\x1b]52;c;cHduZWQ=\\x07x-evil: \\u009b2J\\u0085\n"))
				g.Expect(r.stdout).To(ContainSubstring("Value (40 bytes, text):\nline 1\\x1b[31m red\\r\n0/9   1m   Resolved\\u2066\\x7f\n"))
			}
			// a hostile value forges no table row nor shifts a column: one line per dead letter, its
			// tab shown as \t
			if args[0] == "list" {
				g.Expect(strings.Count(r.stdout, "\n")).To(Equal(2), r.stdout)
				g.Expect(r.stdout).To(ContainSubstring(`   \t=1+1   `))
			}
		})
	}
	t.Run("show -o json is the same data, escaped", func(t *testing.T) {
		g := NewWithT(t)
		r := run(t, false, "show", "orders-dlq", "0/0", "-o", "json")
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		g.Expect(unsafeRunes(r.stdout)).To(BeEmpty(), "printed:\n%s", r.stdout)
		var got dlv1.DeadLetter
		g.Expect(json.Unmarshal([]byte(r.stdout), &got)).To(Succeed())
		g.Expect(got.Key.Data).To(Equal(d.Key.Data))
		g.Expect(got.Headers).To(Equal(d.Headers))
	})
	t.Run("show -o yaml", func(t *testing.T) {
		g := NewWithT(t)
		r := run(t, false, "show", "orders-dlq", "0/0", "-o", "yaml")
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		var got dlv1.DeadLetter
		g.Expect(yaml.Unmarshal([]byte(r.stdout), &got)).To(Succeed())
		g.Expect(got.Key.Data).To(Equal(d.Key.Data), "off a terminal, -o yaml is the data")
		g.Expect(got.Value.Data).To(Equal(d.Value.Data))
		tty := run(t, true, "show", "orders-dlq", "0/0", "-o", "yaml")
		g.Expect(tty.code).To(Equal(ExitOK), tty.stderr)
		g.Expect(unsafeRunes(tty.stdout)).To(BeEmpty(), "printed:\n%s", tty.stdout)
	})
	t.Run("csv on a terminal", func(t *testing.T) {
		g := NewWithT(t)
		r := run(t, true, "list", "orders-dlq", "-o", "csv")
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		g.Expect(unsafeRunes(r.stdout)).To(BeEmpty(), "printed:\n%s", r.stdout)
	})
	t.Run("stats and actions", func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		q := &retryv1alpha1.DeadLetterQueue{}
		g.Expect(e.Client.Get(ctx, client.ObjectKey{Namespace: "termhostile", Name: "orders-dlq"}, q)).To(Succeed())
		q.Status = retryv1alpha1.DeadLetterQueueStatus{Messages: ptr.To[int64](1), Pending: ptr.To[int64](1), Topic: "t",
			Reasons: []retryv1alpha1.NamedCount{{Name: "x\x1b]0;pwned\x07", Count: 1}}, ErrorTypes: []retryv1alpha1.NamedCount{{Name: "\u009b2J\u202e", Count: 1}}}
		g.Expect(e.Client.Status().Update(ctx, q)).To(Succeed())
		for _, out := range []string{"", "yaml"} {
			args := []string{"stats", "orders-dlq"}
			if out != "" {
				args = append(args, "-o", out)
			}
			r := run(t, true, args...)
			g.Expect(r.code).To(Equal(ExitOK), r.stderr)
			g.Expect(unsafeRunes(r.stdout)).To(BeEmpty(), "printed:\n%s", r.stdout)
		}
		a := &retryv1alpha1.DeadLetterAction{ObjectMeta: metav1.ObjectMeta{Namespace: "termhostile", Name: "resolve-1"},
			Spec: retryv1alpha1.DeadLetterActionSpec{Queue: "orders-dlq", Action: retryv1alpha1.DeadLetterResolve, RequestedBy: "alice", Note: "\x1b[2Jnote\u202e"}}
		g.Expect(e.Client.Create(ctx, a)).To(Succeed())
		r := run(t, false, "actions", "-o", "wide")
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		g.Expect(unsafeRunes(r.stdout)).To(BeEmpty(), "printed:\n%s", r.stdout)
		g.Expect(r.stdout).To(ContainSubstring(`\x1b[2Jnote\u202e`))
	})
}

// TestWarningsAreEscaped: a warning of the API server is printed on stderr, escaped (client-go
// refuses a warning with a C0 or C1 control, not one with a bidi override).
func TestWarningsAreEscaped(t *testing.T) {
	g := NewWithT(t)
	q := retryv1alpha1.DeadLetterQueue{TypeMeta: metav1.TypeMeta{APIVersion: retryv1alpha1.GroupVersion.String(), Kind: "DeadLetterQueue"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "warned", Name: "orders-dlq"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Warning", "299 - \"topic \u202eowned\u2066 by someone else\"")
		writeJSON(w, http.StatusOK, q)
	}))
	t.Cleanup(srv.Close)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {}}]
contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: warned}}]
current-context: fake
`, srv.URL)), 0o600)).To(Succeed())
	r := runPlugin(t, kubeconfig, true, "stats", "orders-dlq")
	g.Expect(r.code).To(Equal(ExitOK), r.stderr)
	g.Expect(r.stderr).To(Equal("Warning: topic \\u202eowned\\u2066 by someone else\n"))
}

// TestCSVNeutralisesFormulasAfterASeparator: a spreadsheet whose list separator is ';' (Excel in a
// German or French locale opening a .csv), or one importing with tab as the separator (Excel's text
// import wizard), splits a row at every such separator and line break, and honours a quote only at the
// start of its own field; our cells do not start its fields, so a cell "x;=1+1;y" or
// "503\n=cmd|..." starts a field with the formula there (OWASP: "also take care of the field
// separator"). Read as such a spreadsheet reads it, no field of the output is a formula.
func TestCSVNeutralisesFormulasAfterASeparator(t *testing.T) {
	g := NewWithT(t)
	cells := []string{
		"orders-dlq",
		"x;=1+1;y",
		"status 503\n=cmd|' /C calc'!A0\n",
		"a; @SUM(1+1)",
		"a;\"+1+1\"",
		"line\r\n-2+3",
		"col\t=1+1\t",
		"\t=1+1",
		"a;-5;1.5",
		"plain; text",
	}
	var out strings.Builder
	w := newCSV(&Options{terminal: func(io.Writer) bool { return false }}, &out, make([]string, len(cells))...)
	g.Expect(w.Write(cells)).To(Succeed())
	w.Flush()
	g.Expect(w.Error()).NotTo(HaveOccurred())
	for _, sep := range []rune{';', '\t'} {
		for _, field := range splitLikeASpreadsheet(out.String(), sep) {
			trimmed := strings.TrimLeft(field, " \t\r\n\"")
			if first, _ := utf8.DecodeRuneInString(trimmed); strings.ContainsRune("=+-@", first) && field != "-5" {
				t.Errorf("separator %q: the field %q is a formula (the CSV: %q)", sep, field, out.String())
			}
		}
	}
	// the comma-separated cells are still what they were, each risky part quoted
	records, err := csv.NewReader(strings.NewReader(out.String())).ReadAll()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(records[1]).To(Equal([]string{
		"orders-dlq",
		"x;'=1+1;y",
		"status 503\n'=cmd|' /C calc'!A0\n",
		"a;' @SUM(1+1)",
		"a;'\"+1+1\"",
		"line\n'-2+3",
		"col\t'=1+1\t",
		"'\t'=1+1",
		"a;-5;1.5",
		"plain; text",
	}))
}

// splitLikeASpreadsheet splits text into fields as a spreadsheet with separator sep does: at every sep
// and line break, a quote honoured only at the start of a field.
func splitLikeASpreadsheet(text string, sep rune) []string {
	var fields []string
	rs := []rune(text)
	for i := 0; i < len(rs); {
		var f strings.Builder
		if rs[i] == '"' {
			for i++; i < len(rs); i++ {
				if rs[i] == '"' {
					if i+1 < len(rs) && rs[i+1] == '"' {
						f.WriteRune('"')
						i++
						continue
					}
					i++
					break
				}
				f.WriteRune(rs[i])
			}
		}
		for ; i < len(rs) && rs[i] != sep && rs[i] != '\n' && rs[i] != '\r'; i++ {
			f.WriteRune(rs[i])
		}
		fields = append(fields, f.String())
		i++
	}
	return fields
}
