package dlqcli

import (
	"encoding/csv"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"
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

var allOutputs = []string{"table", outWide, outJSON, outYAML, outName, outCSV}

// checkOutput refuses an -o the command does not print; "table" is the default.
func checkOutput(o *Options, allowed ...string) error {
	if o.output == "table" {
		o.output = outTable
	}
	if o.output == outTable {
		return nil
	}
	for _, a := range allowed {
		if o.output == a {
			return nil
		}
	}
	return usagef("-o %q: want one of table, %s", o.output, strings.Join(allowed, ", "))
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

// printObject prints obj (an object or a list) as json, yaml or names.
func printObject(o *Options, obj runtime.Object) error {
	if err := setKinds(obj); err != nil {
		return err
	}
	var p printers.ResourcePrinter
	switch o.output {
	case outJSON:
		p = &printers.JSONPrinter{}
	case outYAML:
		p = &printers.YAMLPrinter{}
	case outName:
		p = &printers.NamePrinter{}
		if meta.IsListType(obj) {
			items, err := meta.ExtractList(obj)
			if err != nil {
				return err
			}
			for _, it := range items {
				if err := p.PrintObj(it, o.streams.Out); err != nil {
					return err
				}
			}
			return nil
		}
	default:
		return fmt.Errorf("no printer for -o %q", o.output)
	}
	return p.PrintObj(obj, o.streams.Out)
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

func (t *table) row(cells ...string) {
	if t.headers != nil {
		fmt.Fprintln(t.w, strings.Join(t.headers, "\t"))
		t.headers = nil
	}
	fmt.Fprintln(t.w, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.w.Flush() }

// csvWriter writes RFC 4180 CSV with a header row unless --no-headers.
func newCSV(w io.Writer, noHeaders bool, headers ...string) *csv.Writer {
	c := csv.NewWriter(w)
	if !noHeaders {
		_ = c.Write(headers)
	}
	return c
}

// orNone is "<none>" for an empty cell, kubectl's way.
func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
