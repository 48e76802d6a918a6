package dlqapi

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
)

// TestTableCellsAreEscaped: kubectl get deadletters prints the API's table, and kubectl's table
// printer escapes only ESC and carriage return (and cuts at a line break); the cells a producer or a
// sink wrote (pipeline, reason, error type) reach it with every control escaped, so that none acts
// on the terminal and a tab cannot move a forged value into another column.
func TestTableCellsAreEscaped(t *testing.T) {
	d := &dlv1.DeadLetter{
		ObjectMeta: metav1.ObjectMeta{Name: "q.0.1", CreationTimestamp: metav1.NewTime(time.Unix(0, 0))},
		Queue:      "q",
		Pipeline:   "shop/\u202eexe.gpj",
		Reason:     "x\tResolved\u009b2J\u009d52;c;cHduZWQ=\u009c",
		ErrorType:  "HTTP503\x07\x1b]0;title\x07",
	}
	table, err := (&Storage{}).ConvertToTable(context.Background(), &dlv1.DeadLetterList{Items: []dlv1.DeadLetter{*d}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(table, &out); err != nil {
		t.Fatal(err)
	}
	for _, r := range out.String() {
		if r != '\n' && (r < 0x20 || r >= 0x7f && r <= 0x9f || r == 0x202e) {
			t.Errorf("the table printed %U raw:\n%q", r, out.String())
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a header and one row, got %q", out.String())
	}
	if f := strings.Fields(lines[1]); len(f) < 4 || f[3] == "Resolved" || !strings.HasPrefix(f[3], `x\tResolved`) {
		t.Errorf("the reason's tab moved a forged value into a column of its own: %q", lines[1])
	}
}
