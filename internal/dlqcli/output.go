package dlqcli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"
)

// The output formats, -o.
const (
	outTable = ""
	outWide  = "wide"
	outJSON  = "json"
	outYAML  = "yaml"
	outName  = "name"
	outCSV   = "csv"
)

// outputFlags is -o as kubectl's own commands take it: cli-runtime's PrintFlags registers it (with
// --show-managed-fields). check takes only the command's formats as written, not what PrintFlags
// would take (any case, kyaml): the printing stays in this file (printObject), as cli-runtime's
// printers would write what a terminal acts on and its YAML refuses C1 controls.
type outputFlags struct {
	print *genericclioptions.PrintFlags
	// formats are the command's, in the order the help lists them. "" (the default) is always
	// allowed, "table" where the default is a table.
	formats []string
}

// addOutputFlags registers -o with formats (deflt describes the default), and --no-headers when one
// of them is a table or CSV.
func addOutputFlags(cmd *cobra.Command, o *Options, deflt string, formats ...string) *outputFlags {
	f := &outputFlags{print: &genericclioptions.PrintFlags{OutputFormat: &o.output}, formats: formats}
	if slices.Contains(formats, outJSON) && slices.Contains(formats, outYAML) {
		f.print.JSONYamlPrintFlags = genericclioptions.NewJSONYamlPrintFlags()
	}
	if slices.Contains(formats, outName) {
		f.print.NamePrintFlags = genericclioptions.NewNamePrintFlags("")
	}
	f.print.AddFlags(cmd)
	usage := "Output format. One of: (" + strings.Join(formats, ", ") + ")."
	if deflt != "" {
		usage += " Default: " + deflt + "."
	}
	cmd.Flags().Lookup("output").Usage = usage
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return formats, cobra.ShellCompDirectiveNoFileComp
	})
	if slices.Contains(formats, "table") || slices.Contains(formats, outCSV) {
		cmd.Flags().BoolVar(&o.noHeaders, "no-headers", false, "Print no header row (table, wide and csv).")
	}
	return f
}

// check refuses an -o the command does not print, case-sensitively as the printers compare it;
// "table" names the default where it is a table.
func (f *outputFlags) check(o *Options) error {
	o.print = f.print
	out := f.print.OutputFormat
	if *out == outTable || slices.Contains(f.formats, *out) {
		if *out == "table" {
			*out = outTable
		}
		return nil
	}
	return usagef("-o %q: want one of %s", *out, strings.Join(f.formats, ", "))
}

// setKinds fills apiVersion and kind of obj and, for a list, of its items, as the API server
// leaves them out of items.
func setKinds(obj runtime.Object) error {
	gvks, _, err := scheme.ObjectKinds(obj)
	if err != nil {
		return err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	if meta.IsListType(obj) {
		items, err := meta.ExtractList(obj)
		if err != nil {
			return err
		}
		for _, it := range items {
			if err := setKinds(it); err != nil {
				return err
			}
		}
		return meta.SetList(obj, items)
	}
	return nil
}

// printObject prints obj (an object or a list) as json, yaml or names. JSON escapes what a terminal
// acts on (jsonSafe: the same data); YAML and names are escaped when stdout is a terminal.
func printObject(o *Options, obj runtime.Object) error {
	if err := setKinds(obj); err != nil {
		return err
	}
	if o.print == nil || o.print.JSONYamlPrintFlags == nil || !o.print.JSONYamlPrintFlags.ShowManagedFields {
		if err := omitManagedFields(obj); err != nil {
			return err
		}
	}
	var out []byte
	switch o.output {
	case outJSON:
		b, err := json.MarshalIndent(obj, "", "    ")
		if err != nil {
			return err
		}
		_, err = o.streams.Out.Write(append(jsonSafe(b), '\n'))
		return err
	case outYAML:
		b, err := toYAML(obj)
		if err != nil {
			return err
		}
		out = b
	case outName:
		var buf bytes.Buffer
		p := &printers.NamePrinter{}
		items, err := objects(obj)
		if err != nil {
			return err
		}
		for _, it := range items {
			if err := p.PrintObj(it, &buf); err != nil {
				return err
			}
		}
		out = buf.Bytes()
	default:
		return fmt.Errorf("no printer for -o %q", o.output)
	}
	if o.terminal(o.streams.Out) {
		out = []byte(escapeText(string(out)))
	}
	_, err := o.streams.Out.Write(out)
	return err
}

// omitManagedFields clears the managedFields of obj and of a list's items, as kubectl get -o yaml
// does without --show-managed-fields.
func omitManagedFields(obj runtime.Object) error {
	items, err := objects(obj)
	for _, it := range items {
		if a, err := meta.Accessor(it); err == nil {
			a.SetManagedFields(nil)
		}
	}
	return err
}

// objects are a list's items (pointers into it), or obj alone.
func objects(obj runtime.Object) ([]runtime.Object, error) {
	if meta.IsListType(obj) {
		return meta.ExtractList(obj)
	}
	return []runtime.Object{obj}, nil
}

// toYAML is v as YAML, by way of JSON as sigs.k8s.io/yaml does it, with the runes YAML refuses in
// its input (DEL and the C1 controls: "yaml: control characters are not allowed") escaped in the
// JSON first, which the YAML then writes escaped in a double-quoted string.
func toYAML(v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(jsonSafe(j))
}

// table prints rows under headers (unless --no-headers), aligned like kubectl get.
type table struct {
	w interface {
		io.Writer
		Flush() error
	}
	// headers are printed before the first row: an empty table prints nothing.
	headers []string
}

func newTable(w io.Writer, noHeaders bool, headers ...string) *table {
	t := &table{w: printers.GetNewTabWriter(w)}
	if !noHeaders {
		t.headers = headers
	}
	return t
}

// row prints one row, each cell escaped for a terminal on one line (escapeLine): a hostile value
// can neither act on the terminal nor, with a tab or a newline, shift the columns or forge a row.
func (t *table) row(cells ...string) {
	if t.headers != nil {
		fmt.Fprintln(t.w, strings.Join(t.headers, "\t"))
		t.headers = nil
	}
	for i, c := range cells {
		cells[i] = escapeLine(c)
	}
	fmt.Fprintln(t.w, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.w.Flush() }

// csvWriter writes RFC 4180 CSV as encoding/csv does, but neutralises formulas: a cell that a
// spreadsheet would take for a formula (formulaCell) gets a single quote first and is always
// quoted, as OWASP recommends against CSV injection. On a terminal every cell is also escaped
// (escapeText), as a cell may hold anything.
type csvWriter struct {
	w    *bufio.Writer
	term bool
	err  error
}

// newCSV writes to w with a header row unless --no-headers.
func newCSV(o *Options, w io.Writer, headers ...string) *csvWriter {
	c := &csvWriter{w: bufio.NewWriter(w), term: o.terminal(w)}
	if !o.noHeaders {
		_ = c.Write(headers)
	}
	return c
}

// Write writes one row.
func (c *csvWriter) Write(cells []string) error {
	if c.err != nil {
		return c.err
	}
	var row strings.Builder
	for i, cell := range cells {
		if i > 0 {
			row.WriteByte(',')
		}
		cell, quote := neutralise(cell)
		if c.term {
			cell = escapeText(cell)
		}
		if quote || csvNeedsQuotes(cell) {
			row.WriteString(`"` + strings.ReplaceAll(cell, `"`, `""`) + `"`)
		} else {
			row.WriteString(cell)
		}
	}
	row.WriteByte('\n')
	_, c.err = c.w.WriteString(row.String())
	return c.err
}

// Flush writes what is buffered; Error says whether a write failed.
func (c *csvWriter) Flush() {
	if err := c.w.Flush(); c.err == nil {
		c.err = err
	}
}

func (c *csvWriter) Error() error { return c.err }

// csvNeedsQuotes is encoding/csv's rule: a comma, a quote or a line break in the cell, a leading
// space, or the cell \. alone.
func csvNeedsQuotes(s string) bool {
	if s == "" {
		return false
	}
	if s == `\.` || strings.ContainsAny(s, ",\"\r\n") {
		return true
	}
	r, _ := utf8.DecodeRuneInString(s)
	return unicode.IsSpace(r)
}

// fieldBreaks are where a spreadsheet reading our CSV with another separator starts a field: ';'
// (Excel in many European locales opens a .csv so) and tab (its text import's default), and a line
// break; such a spreadsheet honours a quote only at the start of its own field, so a break inside
// one of our quoted cells starts a field there.
const fieldBreaks = ";\t\n\r"

// neutralise is cell with a single quote before its start when formulaCell says a spreadsheet could
// take it for a formula, and before each part after a field break that could be one (OWASP: "also
// take care of the field separator"), and whether it changed.
func neutralise(cell string) (string, bool) {
	out, changed := cell, false
	if strings.ContainsAny(cell, fieldBreaks) {
		var b strings.Builder
		rest := cell
		for {
			i := strings.IndexAny(rest, fieldBreaks)
			if i < 0 {
				b.WriteString(rest)
				break
			}
			b.WriteString(rest[:i+1])
			rest = rest[i+1:]
			if formulaCell(rest[:partEnd(rest)]) {
				b.WriteByte('\'')
				changed = true
			}
		}
		out = b.String()
	}
	if formulaCell(cell) {
		out, changed = "'"+out, true
	}
	return out, changed
}

// partEnd is where the part of s before the next field break ends.
func partEnd(s string) int {
	if i := strings.IndexAny(s, fieldBreaks); i >= 0 {
		return i
	}
	return len(s)
}

// formulaTriggers start a formula in a spreadsheet: = + - @, and their full-width forms, which
// some spreadsheets take for the ASCII ones.
const formulaTriggers = "=+-@\uff1d\uff0b\uff0d\uff20"

// formulaCell reports whether a spreadsheet could read s as a formula: it starts with a tab or a
// carriage return, or, after any blanks and quotes, with = + - @ (or their full-width forms). A
// plain decimal number (-12, +3, 1.5) is a number, not a formula, and stays as it is; anything
// else starting so (a key "-abc" too) gets its quote.
func formulaCell(s string) bool {
	if s == "" || plainNumber(s) {
		return false
	}
	if s[0] == '\t' || s[0] == '\r' {
		return true
	}
	rest := strings.TrimLeftFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || r == '"' || r == '\'' || r == '\uff02' || r == '\uff07'
	})
	r, size := utf8.DecodeRuneInString(rest)
	return size > 0 && strings.ContainsRune(formulaTriggers, r)
}

// plainNumber reports whether s is an optional sign, digits, and optionally a point and digits.
func plainNumber(s string) bool {
	if s[0] == '-' || s[0] == '+' {
		s = s[1:]
	}
	whole, frac, dot := strings.Cut(s, ".")
	digits := func(x string) bool {
		return x != "" && strings.Trim(x, "0123456789") == ""
	}
	return digits(whole) && (!dot || digits(frac))
}

// orNone is "<none>" for an empty cell, kubectl's way.
func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
