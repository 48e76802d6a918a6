// Command gen writes config/argocd/argocd-cm.yaml and config/argocd/argo-cd-values.yaml from the
// health scripts under config/argocd/resource_customizations. Run from the repository root:
// go run ./config/argocd/gen.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/retryops/retry-operator/config/argocd"
)

// Files maps each generated file, relative to the repository root, to its renderer.
var files = map[string]func() ([]byte, error){
	"config/argocd/argocd-cm.yaml":      argocd.ConfigMap,
	"config/argocd/argo-cd-values.yaml": argocd.HelmValues,
}

func main() {
	for name, render := range files {
		b, err := render()
		if err == nil {
			err = os.WriteFile(filepath.FromSlash(name), b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen:", name+":", err)
			os.Exit(1)
		}
	}
}
