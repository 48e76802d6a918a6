package promcheck

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Promtool returns promtool's path: on PATH, else installed by hack/setup-prometheus.sh under the
// module root root (Debian's prometheus package).
func Promtool(root string) (string, error) {
	if p, err := exec.LookPath("promtool"); err == nil {
		return p, nil
	}
	script := filepath.Join(root, "hack", "setup-prometheus.sh")
	cmd := exec.Command(script)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s failed: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// ParseWithPromtool has Prometheus' own parser check exprs: they go into a rule file, one alert
// each, which `promtool check rules` parses. The error names the expressions it refused.
func ParseWithPromtool(promtool string, exprs []string) error {
	type rule struct {
		Alert string `json:"alert"`
		Expr  string `json:"expr"`
	}
	rules := make([]rule, len(exprs))
	for i, e := range exprs {
		rules[i] = rule{Alert: fmt.Sprintf("Expr%d", i), Expr: e}
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "exprs", "rules": rules}}})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "promcheck")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	file := filepath.Join(dir, "exprs.yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return err
	}
	out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	if err != nil {
		return fmt.Errorf("promtool check rules: %w\n%s\nthe expressions, by alert name:\n%s", err, out, b)
	}
	return nil
}
