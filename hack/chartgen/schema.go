package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/retryops/retry-operator/internal/chartschema"
)

// schemaPath is the chart's values schema, into which valuesSchema writes the constraints of
// internal/chartschema: written by hand but for those keywords, which are generated.
var schemaPath = filepath.Join(chart, "values.schema.json")

// valuesSchema returns the chart's values schema with the keywords of every constrained value
// (chartschema.Values) merged in, keys in the order the file has them, new ones after.
func valuesSchema(repo string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(repo, schemaPath))
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	root, err := decodeJSON(dec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", schemaPath, err)
	}
	for _, v := range chartschema.Values() {
		node, ok := root.(*object)
		for _, name := range strings.Split(v.Path, ".") {
			if !ok {
				break
			}
			var props any
			if props, ok = node.get("properties"); ok {
				var p any
				node, ok = props.(*object)
				if ok {
					p, _ = node.get(name)
					node, ok = p.(*object)
				}
			}
		}
		if !ok {
			return nil, fmt.Errorf("%s: no schema for %s (%s)", schemaPath, v.Path, v.Flag)
		}
		merge(node, v.Keywords())
	}
	var compact bytes.Buffer
	encodeJSON(&compact, root)
	var out bytes.Buffer
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// object is a JSON object that keeps the order of its keys.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

func (o *object) set(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

// merge sets the keywords kw in o, merging into the objects o already has.
func merge(o *object, kw map[string]any) {
	keys := make([]string, 0, len(kw))
	for k := range kw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if sub, ok := kw[k].(map[string]any); ok {
			if have, ok := o.vals[k].(*object); ok {
				merge(have, sub)
				continue
			}
		}
		o.set(k, fromGo(kw[k]))
	}
}

// fromGo turns the keywords' Go values into the decoder's: maps into objects (keys sorted).
func fromGo(v any) any {
	switch v := v.(type) {
	case map[string]any:
		o := &object{vals: map[string]any{}}
		merge(o, v)
		return o
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = fromGo(e)
		}
		return out
	default:
		return v
	}
}

// decodeJSON reads one JSON value, objects as *object.
func decodeJSON(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &object{vals: map[string]any{}}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeJSON(dec)
			if err != nil {
				return nil, err
			}
			o.set(k.(string), v)
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		out := []any{}
		for dec.More() {
			v, err := decodeJSON(dec)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		_, err := dec.Token()
		return out, err
	default:
		return tok, nil
	}
}

// encodeJSON writes v compactly, without escaping HTML characters.
func encodeJSON(w *bytes.Buffer, v any) {
	switch v := v.(type) {
	case *object:
		w.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				w.WriteByte(',')
			}
			encodeJSON(w, k)
			w.WriteByte(':')
			encodeJSON(w, v.vals[k])
		}
		w.WriteByte('}')
	case []any:
		w.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				w.WriteByte(',')
			}
			encodeJSON(w, e)
		}
		w.WriteByte(']')
	default:
		enc := json.NewEncoder(io.Writer(w))
		enc.SetEscapeHTML(false)
		// Strings, numbers, booleans and null always encode.
		_ = enc.Encode(v)
		w.Truncate(w.Len() - 1) // Encode's newline
	}
}
