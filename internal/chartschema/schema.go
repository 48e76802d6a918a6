// Package chartschema holds the constraints of the Helm chart's values that the manager checks at
// start: for each value the chart turns into a manager flag, the JSON Schema keywords that refuse
// what the manager's validation of that flag would refuse. hack/chartgen writes them into
// charts/retry-operator/values.schema.json (`make manifests`; `make verify` fails when they are
// stale), and this package's tests check, value by value, that whatever a constraint accepts the
// manager accepts too: a release the chart renders never has a manager that exits at start for a
// flag. A constraint may be stricter than the manager where a regular expression cannot say
// exactly what it checks (each says where); the chart's templates check the rules between values.
//
// A manager flag the chart sets is a value in values.yaml (documented, and in the schema), passed in
// templates/deployment.yaml only when set, so that the defaults deploy what config/default does, with
// a case in test/helm/render_test.go. A flag the manager checks at start gets its constraint here,
// or, for a rule between values, a fail in retry-operator.validate (templates/_helpers.tpl), with a
// case in test/helm/refusals_test.go.
package chartschema

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"
)

// Placeholder stands for a namespace in the claim policy's prefixes and the consumer Secret's name
// (kafkaspec.NamespacePlaceholder, checked by the tests).
const Placeholder = "{namespace}"

// String is the constraint of one string value.
type String struct {
	// Patterns must all match (the first is written as "pattern", the others in "allOf").
	Patterns []string
	// MaxLength bounds the length in characters; 0: no bound.
	MaxLength int
	// Lengths bound the length further when a pattern matches (each an if/then in "allOf").
	Lengths []Length
}

// Length is a bound on the length of a value that matches If; MaxLength < 0 refuses the value.
type Length struct {
	If        string
	MaxLength int
}

// Value is the constraint of one chart value: a string, an array's items or an object's keys and
// values.
type Value struct {
	// Path is the value's path in values.yaml, as claimPolicy.topicPrefix.
	Path string
	// Flag is the manager flag the chart sets from it.
	Flag string
	// String constrains a string value or, with Items, each item of an array.
	String *String
	// Items is true when String constrains the items of an array.
	Items bool
	// Keys and Values constrain the keys and the values of an object.
	Keys, Values *String
}

// placeholder is Placeholder as a regular expression.
var placeholder = regexp.QuoteMeta(Placeholder)

// Character classes of the patterns, in \x escapes that Go's RE2 and ECMA-262 (JSON Schema) read the
// same way.
const (
	topicChar = `[A-Za-z0-9._-]`
	// A character that no namespace name has, among those of a topic name.
	topicSeparator = `[A-Z._]`
	// A character of a consumer group prefix: printable ASCII but '{', which only a placeholder may
	// hold.
	groupChar      = `[\x20-\x7a\x7c-\x7e]`
	groupSeparator = `[\x20-\x2c\x2e\x2f\x3a-\x60\x7c-\x7e]`
	port           = `([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])`
	dnsLabel       = `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
)

// prefixPattern is a claim policy prefix of chars: without the placeholder, or with a separator
// (or another placeholder) after the first one and before the end, so that no namespace's names
// start another's (kafkaspec's separates).
func prefixPattern(char, sep string) string {
	return fmt.Sprintf(`^(%[1]s*|%[1]s*%[3]s[a-z0-9-]*(%[2]s|%[3]s)(%[1]s|%[3]s)*)$`, char, sep, placeholder)
}

// consumerSecretLengths bound the consumer Secret's name so that it is at most 253 characters once
// each placeholder is replaced by the longest namespace name (63 characters).
func consumerSecretLengths() []Length {
	var out []Length
	for k := 1; ; k++ {
		rest := 253 - k*(63-len(Placeholder))
		if rest < k*len(Placeholder) {
			return append(out, Length{If: fmt.Sprintf(`(%s.*){%d}`, placeholder, k), MaxLength: -1})
		}
		out = append(out, Length{If: fmt.Sprintf(`(%s.*){%d}`, placeholder, k), MaxLength: rest})
	}
}

// LogLevels are the words --zap-log-level takes (controller-runtime's zap flags, lower case); it
// also takes a positive integer, the verbosity, of which the chart allows 1 to 127 (int8).
var LogLevels = []string{"debug", "info", "error", "panic"}

// Values are the constraints of the chart's values, in the order of values.yaml.
func Values() []Value {
	secretLabel := fmt.Sprintf(`([a-z0-9]|%[1]s)(([-a-z0-9]|%[1]s)*([a-z0-9]|%[1]s))?`, placeholder)
	return []Value{
		{Path: "kafka.consumerSecret", Flag: "--kafka-consumer-secret",
			String: &String{Patterns: []string{fmt.Sprintf(`^(%[1]s(\.%[1]s)*)?$`, secretLabel)}, MaxLength: 253, Lengths: consumerSecretLengths()}},
		// Stricter than the manager: at most 200 characters placeholders included (the manager
		// counts the rest).
		{Path: "claimPolicy.topicPrefix", Flag: "--topic-prefix",
			String: &String{Patterns: []string{prefixPattern(topicChar, topicSeparator)}, MaxLength: 200}},
		// Stricter than the manager: printable ASCII only, and '{' only in a placeholder.
		{Path: "claimPolicy.groupPrefix", Flag: "--group-prefix",
			String: &String{Patterns: []string{prefixPattern(groupChar, groupSeparator)}, MaxLength: 200}},
		// Stricter than the manager: a host of letters, digits, '_' and '-' in dot-separated labels
		// (or an IPv6 address in brackets), a port without leading zeros.
		{Path: "claimPolicy.allowedBootstrapServers", Flag: "--kafka-allowed-bootstrap-servers", Items: true,
			String: &String{Patterns: []string{`^((\*\.)?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*|\[[0-9A-Fa-f:.]+\]):` + port + `$`}}},
		// A label key (a qualified name) and value, as Kubernetes checks them.
		{Path: "alerts.ruleLabels", Flag: "--alert-rule-labels",
			Keys: &String{Patterns: []string{
				`^(` + dnsLabel + `(\.` + dnsLabel + `)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`,
				`^([^/]{1,253}/)?[^/]{1,63}$`}},
			Values: &String{Patterns: []string{`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`}, MaxLength: 63}},
		// Stricter than the manager: a host of letters, digits, '.' and '-', and no '%' but escapes.
		{Path: "alerts.runbookBaseURL", Flag: "--alert-runbook-base-url",
			String: &String{Patterns: []string{`^(https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?([/?]([^#%\x00-\x20\x7f]|%[0-9A-Fa-f]{2})*)?)?$`}}},
		// Stricter than the manager: lower case, and verbosities 1 to 127.
		{Path: "logLevel", Flag: "--zap-log-level",
			String: &String{Patterns: []string{`^(` + strings.Join(LogLevels, "|") + `|[1-9][0-9]?|1[01][0-9]|12[0-7])?$`}}},
	}
}

// Keywords are the JSON Schema keywords of s.
func (s *String) Keywords() map[string]any {
	kw := map[string]any{}
	if len(s.Patterns) > 0 {
		kw["pattern"] = s.Patterns[0]
	}
	if s.MaxLength > 0 {
		kw["maxLength"] = s.MaxLength
	}
	var all []any
	for _, p := range s.Patterns[min(1, len(s.Patterns)):] {
		all = append(all, map[string]any{"pattern": p})
	}
	for _, l := range s.Lengths {
		var then any = false
		if l.MaxLength >= 0 {
			then = map[string]any{"maxLength": l.MaxLength}
		}
		all = append(all, map[string]any{"if": map[string]any{"pattern": l.If}, "then": then})
	}
	if len(all) > 0 {
		kw["allOf"] = all
	}
	return kw
}

// Accepts reports whether v meets s as a JSON Schema validator reads its keywords: patterns
// unanchored unless they say so, lengths in characters.
func (s *String) Accepts(v string) bool {
	n := utf8.RuneCountInString(v)
	if s.MaxLength > 0 && n > s.MaxLength {
		return false
	}
	for _, p := range s.Patterns {
		if !compiled(p).MatchString(v) {
			return false
		}
	}
	for _, l := range s.Lengths {
		if compiled(l.If).MatchString(v) && (l.MaxLength < 0 || n > l.MaxLength) {
			return false
		}
	}
	return true
}

// Keywords are the JSON Schema keywords of the value: of the string, of the array's items, or of
// the object's property names and values.
func (v Value) Keywords() map[string]any {
	var kw map[string]any
	switch {
	case v.Items:
		kw = map[string]any{"items": v.String.Keywords()}
	case v.Keys != nil:
		kw = map[string]any{"propertyNames": v.Keys.Keywords(), "additionalProperties": v.Values.Keywords()}
	default:
		kw = v.String.Keywords()
	}
	kw["$comment"] = "Generated by hack/chartgen from internal/chartschema: what the manager's " + v.Flag + " accepts."
	return kw
}

var regexps sync.Map

// compiled is the regular expression p, compiled once.
func compiled(p string) *regexp.Regexp {
	if re, ok := regexps.Load(p); ok {
		return re.(*regexp.Regexp)
	}
	re := regexp.MustCompile(p)
	regexps.Store(p, re)
	return re
}
