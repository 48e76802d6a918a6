package config

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Version is the version of the config file format this module writes and reads ("major.minor").
// A minor version adds optional fields; a major version changes or removes fields.
const Version = "1.0"

const (
	versionMajor = 1
	versionMinor = 0
	// modulePath names the module to upgrade in the version errors.
	modulePath = "github.com/retryops/retry-operator/sdk"
	// maxNamedFields bounds the unknown fields an error names; the rest are counted.
	maxNamedFields = 10
	// maxNameBytes bounds each name (a hostile file's key could be a megabyte long).
	maxNameBytes = 64
)

// MaxConfigBytes bounds the config file: a ConfigMap holds at most 1 MiB, so no rendered config is
// larger, and a larger file is refused before it is decoded.
const MaxConfigBytes = 1 << 20

// ErrUnsupportedVersion is what errors.Is finds in the error of a config this module cannot read:
// a malformed version, another major version, or a newer minor version with fields this module
// does not know. Upgrading the module is the remedy.
var ErrUnsupportedVersion = errors.New("unsupported config version")

// versionError is a refusal of the file's version, with its own message.
type versionError struct{ msg string }

func (e *versionError) Error() string        { return e.msg }
func (e *versionError) Is(target error) bool { return target == ErrUnsupportedVersion }

// parseVersion reads "major.minor": decimal numbers without sign, spaces or leading zeros, each
// below 65536.
func parseVersion(v string) (major, minor uint64, err error) {
	num := func(s string) (uint64, bool) {
		if s == "" || (len(s) > 1 && s[0] == '0') || strings.ContainsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) {
			return 0, false
		}
		n, err := strconv.ParseUint(s, 10, 16)
		return n, err == nil
	}
	maj, min, ok := strings.Cut(v, ".")
	if ok {
		var okMaj, okMin bool
		major, okMaj = num(maj)
		minor, okMin = num(min)
		ok = okMaj && okMin
	}
	if !ok {
		return 0, 0, &versionError{fmt.Sprintf("config version \"%s\" is not a major.minor version such as %q", printable(v), Version)}
	}
	return major, minor, nil
}

// checkVersion refuses a version this module cannot run whatever the file's fields: a malformed
// one or another major. "" is a config built in Go or a file without a version: 1.0.
func checkVersion(v string) (minor uint64, err error) {
	if v == "" {
		return versionMinor, nil
	}
	major, minor, err := parseVersion(v)
	if err != nil {
		return 0, err
	}
	if major != versionMajor {
		return 0, &versionError{fmt.Sprintf("config version %s: this module reads %d.x; upgrade %s", v, versionMajor, modulePath)}
	}
	return minor, nil
}

// unknownFieldsError names the fields of a file that its version's reader does not know.
func unknownFieldsError(version string, minor uint64, u *unknownFields) error {
	if minor > versionMinor {
		return &versionError{fmt.Sprintf("config version %s is newer than this module's %s and has fields it does not know: %s; upgrade %s to one that reads %s",
			version, Version, u.list(false), modulePath, version)}
	}
	if u.count() == 1 {
		return fmt.Errorf("unknown field %s: not a field of config version %s", u.list(true), Version)
	}
	return fmt.Errorf("unknown fields %s: not fields of config version %s", u.list(true), Version)
}

// unknownFields collects the paths of unknown fields in file order, the first maxNamedFields named.
type unknownFields struct {
	named []string
	seen  map[string]bool
	more  int
}

func (u *unknownFields) add(path string) {
	if u.seen[path] {
		return
	}
	if len(u.named) == maxNamedFields {
		u.more++
		return
	}
	if u.seen == nil {
		u.seen = map[string]bool{}
	}
	u.seen[path] = true
	u.named = append(u.named, path)
}

func (u *unknownFields) count() int { return len(u.named) + u.more }

func (u *unknownFields) list(quote bool) string {
	names := u.named
	if quote {
		names = make([]string, len(u.named))
		for i, n := range u.named {
			names[i] = `"` + n + `"`
		}
	}
	s := strings.Join(names, ", ")
	if u.more > 0 {
		s += fmt.Sprintf(" and %d more", u.more)
	}
	return s
}

// printable makes a name from the file safe to print: a plain name as is, anything else escaped,
// and cut to maxNameBytes.
func printable(s string) string {
	cut := len(s) > maxNameBytes
	if cut {
		s = s[:maxNameBytes]
	}
	plain := s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return r != '-' && r != '_' && r != '.' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z')
	})
	if cut {
		s += "..."
	}
	if plain && !cut {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// scan walks the JSON value under dec along type t, as encoding/json would decode it, and records
// the fields t has no place for (object keys matched as encoding/json matches them: exactly, else
// case-insensitively). It reads the file's top-level "version" into *version. Its recursion follows
// t, not the file, so a hostile nesting depth costs no stack; values t does not describe are
// skipped, and their type errors are left to the decoder. It also finds what encoding/json would
// take silently or report without a path: a field given twice (dup: the decoder keeps the last, or
// merges two objects) and the first value a json.Unmarshaler refuses (valueErr, with its path).
type scan struct {
	dec      *json.Decoder
	unknown  unknownFields
	version  *json.RawMessage
	dup      string
	valueErr error
}

func (s *scan) value(t reflect.Type, path string, top bool) error {
	nullable := false
	for t.Kind() == reflect.Pointer {
		t, nullable = t.Elem(), true
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return s.unmarshaler(t, path, nullable)
	}
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		return s.skip()
	}
	tok, err := s.dec.Token()
	if err != nil {
		return err
	}
	switch {
	case tok == json.Delim('{') && (t.Kind() == reflect.Struct || t.Kind() == reflect.Map):
		seen := map[string]bool{}
		for s.dec.More() {
			key, err := s.dec.Token()
			if err != nil {
				return err
			}
			name, _ := key.(string)
			field, id, known := fieldType(t, name)
			p := printable(name)
			if path != "" {
				p = path + "." + p
			}
			if known && seen[id] && s.dup == "" {
				s.dup = p
			}
			seen[id] = true
			if top && known && t.Kind() == reflect.Struct && strings.EqualFold(name, "version") {
				var raw json.RawMessage
				if err := s.dec.Decode(&raw); err != nil {
					return err
				}
				*s.version = raw
				continue
			}
			if !known {
				s.unknown.add(p)
				err = s.skip()
			} else {
				err = s.value(field, p, false)
			}
			if err != nil {
				return err
			}
		}
	case tok == json.Delim('[') && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		for i := 0; s.dec.More(); i++ {
			if err := s.value(t.Elem(), fmt.Sprintf("%s[%d]", path, i), false); err != nil {
				return err
			}
		}
	case tok == json.Delim('{') || tok == json.Delim('['):
		return s.skipRest()
	default:
		return nil
	}
	_, err = s.dec.Token() // the closing delimiter
	return err
}

// unmarshaler reads a value of a type with its own UnmarshalJSON, calls it as encoding/json would
// (but for null into a pointer, which is nil) and keeps the first error with its path.
func (s *scan) unmarshaler(t reflect.Type, path string, nullable bool) error {
	var raw json.RawMessage
	if err := s.dec.Decode(&raw); err != nil {
		return err
	}
	if nullable && string(raw) == "null" {
		return nil
	}
	if err := reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(raw); err != nil && s.valueErr == nil {
		s.valueErr = fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// skip reads one value, whatever it holds.
func (s *scan) skip() error {
	tok, err := s.dec.Token()
	if err != nil {
		return err
	}
	if tok == json.Delim('{') || tok == json.Delim('[') {
		return s.skipRest()
	}
	return nil
}

// skipRest reads up to the delimiter closing the object or array just opened, without recursion.
func (s *scan) skipRest() error {
	for depth := 1; depth > 0; {
		tok, err := s.dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

// fieldType is the type of the value under key in an object decoded into t, and what it fills: a
// map's element under key, or the struct field encoding/json would fill (its JSON name exactly,
// else case-insensitively), named by its JSON name.
func fieldType(t reflect.Type, key string) (reflect.Type, string, bool) {
	if t.Kind() == reflect.Map {
		return t.Elem(), key, true
	}
	var folded *jsonField
	for _, f := range jsonFields(t) {
		if f.name == key {
			return f.typ, f.name, true
		}
		if folded == nil && strings.EqualFold(f.name, key) {
			folded = &f
		}
	}
	if folded == nil {
		return nil, "", false
	}
	return folded.typ, folded.name, true
}

type jsonField struct {
	name string
	typ  reflect.Type
}

// jsonFields lists a struct's fields by JSON name, an untagged embedded struct's fields among them.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				out = append(out, jsonFields(ft)...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name: name, typ: f.Type})
	}
	return out
}
