// Command chartgen writes the Helm chart's templates that config/ already holds, so that the two
// cannot drift: the CRDs (config/crd/bases, behind crds.enabled, kept on uninstall when crds.keep),
// the roles of config/rbac, and the admission policies of config/admission (behind
// admissionPolicies.enabled). `make manifests` runs it after controller-gen; `make verify` fails when
// its output is stale. The objects' bodies are copied as they are, comments included; only their
// metadata is rewritten: names prefixed as config/default's namePrefix does, the release's namespace,
// the chart's labels. It also copies, byte for byte, the files the chart ships as they are made under
// config/: the Grafana dashboards (config/grafana, written by `make dashboard`) into files/dashboards,
// which templates/dashboards.yaml renders, and the Argo CD health checks' argocd-cm snippet and Helm
// values (config/argocd, written by `go run ./config/argocd/gen`) into files/argocd. Run it after
// those generators: `make manifests` and `make dashboard` do. Last, it writes into values.schema.json
// the constraints of internal/chartschema: the values the manager would refuse at start.
//
//	go run ./hack/chartgen [-repo DIR]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// output is one generated template: the documents of its sources whose kind is in kinds, wrapped
// in cond when set.
type output struct {
	path    string
	sources []string
	kinds   map[string]bool
	cond    string
	// prefix prefixes metadata.name (and a binding's spec.policyName) with the chart's fullname.
	prefix bool
	// keep adds helm.sh/resource-policy: keep when .Values.crds.keep.
	keep bool
}

const chart = "charts/retry-operator"

func outputs(repo string) ([]output, error) {
	crds, err := filepath.Glob(filepath.Join(repo, "config/crd/bases/*.yaml"))
	if err != nil {
		return nil, err
	}
	var outs []output
	for _, crd := range crds {
		rel, _ := filepath.Rel(repo, crd)
		name := strings.TrimPrefix(filepath.Base(crd), "retry.retryops.dev_")
		outs = append(outs, output{
			path: filepath.Join(chart, "templates/crds", name), sources: []string{rel},
			kinds: map[string]bool{"CustomResourceDefinition": true}, cond: ".Values.crds.enabled", keep: true,
		})
	}
	rbac, err := kustomizationResources(repo, "config/rbac")
	if err != nil {
		return nil, err
	}
	admission, err := kustomizationResources(repo, "config/admission")
	if err != nil {
		return nil, err
	}
	return append(outs,
		output{path: filepath.Join(chart, "templates/rbac-roles.yaml"), sources: rbac,
			kinds: map[string]bool{"ClusterRole": true, "Role": true}, prefix: true},
		output{path: filepath.Join(chart, "templates/admission-policies.yaml"), sources: admission,
			kinds:  map[string]bool{"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true},
			cond:   ".Values.admissionPolicies.enabled",
			prefix: true},
	), nil
}

// copied are the files the chart ships unchanged: each glob under config/ and the chart's directory
// it is copied into, which holds nothing else (a file removed from config/ leaves the chart too).
var copied = []struct{ glob, dir string }{
	{"config/grafana/*.json", chart + "/files/dashboards"},
	{"config/argocd/*.yaml", chart + "/files/argocd"},
}

// copies maps each copied file's path in the chart to its content, read from config/.
func copies(repo string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, c := range copied {
		srcs, err := filepath.Glob(filepath.Join(repo, c.glob))
		if err != nil {
			return nil, err
		}
		if len(srcs) == 0 {
			return nil, fmt.Errorf("no file matches %s: run its generator first", c.glob)
		}
		for _, src := range srcs {
			data, err := os.ReadFile(src)
			if err != nil {
				return nil, err
			}
			out[filepath.Join(c.dir, filepath.Base(src))] = data
		}
	}
	return out, nil
}

// kustomizationResources lists the resources of dir's kustomization.yaml, relative to repo.
func kustomizationResources(repo, dir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(repo, dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("%s/kustomization.yaml: %w", dir, err)
	}
	out := make([]string, len(k.Resources))
	for i, r := range k.Resources {
		out[i] = filepath.Join(dir, r)
	}
	return out, nil
}

func main() {
	repo := flag.String("repo", ".", "the repository's root")
	flag.Parse()
	outs, err := outputs(*repo)
	if err != nil {
		fail(err)
	}
	texts := make([][]byte, len(outs))
	for i, o := range outs {
		if texts[i], err = render(*repo, o); err != nil {
			fail(fmt.Errorf("%s: %w", o.path, err))
		}
	}
	files, err := copies(*repo)
	if err != nil {
		fail(err)
	}
	for i, o := range outs {
		files[o.path] = texts[i]
	}
	if files[schemaPath], err = valuesSchema(*repo); err != nil {
		fail(err)
	}
	// A CRD (or a copied file) removed from config/ leaves the chart too.
	dirs := []string{filepath.Join(chart, "templates/crds")}
	for _, c := range copied {
		dirs = append(dirs, c.dir)
	}
	for _, dir := range dirs {
		if err := os.RemoveAll(filepath.Join(*repo, dir)); err != nil {
			fail(err)
		}
	}
	for _, name := range sortedKeys(files) {
		path := filepath.Join(*repo, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			fail(err)
		}
		if err := os.WriteFile(path, files[name], 0o644); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chartgen:", err)
	os.Exit(1)
}

func render(repo string, o output) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "{{- /* Generated by hack/chartgen from %s (`make manifests`); do not edit. */}}\n", strings.Join(o.sources, ", "))
	if o.cond != "" {
		fmt.Fprintf(&b, "{{- if %s }}\n", o.cond)
	}
	n := 0
	for _, src := range o.sources {
		data, err := os.ReadFile(filepath.Join(repo, src))
		if err != nil {
			return nil, err
		}
		for _, doc := range splitDocuments(string(data)) {
			kind, err := kindOf(doc)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", src, err)
			}
			if !o.kinds[kind] {
				continue
			}
			out, err := rewrite(doc, kind, o)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", src, err)
			}
			b.WriteString("---\n")
			b.WriteString(out)
			n++
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("no object of kinds %v in %v", o.kinds, o.sources)
	}
	if o.cond != "" {
		b.WriteString("{{- end }}\n")
	}
	return b.Bytes(), nil
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$\n?`)

// splitDocuments splits a YAML stream into its documents, leaving out empty ones.
func splitDocuments(s string) []string {
	var docs []string
	for _, d := range docSeparator.Split(s, -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, strings.TrimLeft(d, "\n"))
		}
	}
	return docs
}

func stripComments(s string) string {
	var kept []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}

func kindOf(doc string) (string, error) {
	var m struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		return "", err
	}
	if m.Kind == "" {
		return "", fmt.Errorf("a document without kind:\n%s", doc)
	}
	return m.Kind, nil
}

// rewrite replaces doc's top-level metadata block with the chart's, escapes what Helm would read as
// template actions, and prefixes a binding's spec.policyName.
func rewrite(doc, kind string, o output) (string, error) {
	lines := strings.Split(strings.TrimRight(doc, "\n"), "\n")
	start := -1
	for i, l := range lines {
		if l == "metadata:" {
			start = i
			break
		}
	}
	if start < 0 {
		return "", fmt.Errorf("%s without a top-level metadata block", kind)
	}
	end := start + 1
	for end < len(lines) && (lines[end] == "" || strings.HasPrefix(lines[end], " ")) {
		end++
	}
	var meta struct {
		Metadata struct {
			Name        string            `json:"name"`
			Namespace   string            `json:"namespace"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(strings.Join(lines[start:end], "\n")), &meta); err != nil {
		return "", err
	}
	m := meta.Metadata
	var b strings.Builder
	b.WriteString("metadata:\n")
	if o.prefix {
		fmt.Fprintf(&b, "  name: {{ include \"retry-operator.fullname\" . }}-%s\n", m.Name)
	} else {
		fmt.Fprintf(&b, "  name: %s\n", m.Name)
	}
	switch {
	case kind == "Role" && m.Name == "leader-election-role":
		// The Lease is where --leader-election-namespace puts it.
		b.WriteString("  namespace: {{ include \"retry-operator.leaseNamespace\" . }}\n")
	case m.Namespace != "":
		b.WriteString("  namespace: {{ .Release.Namespace }}\n")
	}
	b.WriteString("  labels:\n    {{- include \"retry-operator.labels\" . | nindent 4 }}\n")
	for _, k := range sortedKeys(m.Labels) {
		fmt.Fprintf(&b, "    %s: %q\n", k, m.Labels[k])
	}
	if len(m.Annotations) > 0 || o.keep {
		b.WriteString("  annotations:\n")
		for _, k := range sortedKeys(m.Annotations) {
			fmt.Fprintf(&b, "    %s: %q\n", k, m.Annotations[k])
		}
		if o.keep {
			b.WriteString("    {{- if .Values.crds.keep }}\n    helm.sh/resource-policy: keep\n    {{- end }}\n")
		}
	}
	body := escape(strings.Join(lines[:start], "\n"))
	if body != "" {
		body += "\n"
	}
	body += b.String() + escape(strings.Join(lines[end:], "\n")) + "\n"
	if kind == "ValidatingAdmissionPolicyBinding" && o.prefix {
		re := regexp.MustCompile(`(?m)^  policyName: (\S+)$`)
		if !re.MatchString(body) {
			return "", fmt.Errorf("binding %s without spec.policyName", m.Name)
		}
		body = re.ReplaceAllString(body, `  policyName: {{ include "retry-operator.fullname" . }}-$1`)
	}
	return body, nil
}

// escape makes Helm print "{{" instead of reading a template action.
func escape(s string) string { return strings.ReplaceAll(s, "{{", `{{ "{{" }}`) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
