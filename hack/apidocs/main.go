// Command apidocs writes docs/api-reference.md from the CRDs in config/crd/bases. Their OpenAPI
// schemas are the Go types' godoc as controller-gen wrote it, with what the markers add (types,
// defaults, enums, bounds, patterns and the CEL rules with their messages), so the reference says
// exactly what the API server enforces. `make manifests` runs it after controller-gen; `make verify`
// fails when the file is stale, and so does this package's test.
//
//	go run ./hack/apidocs [-repo DIR] [-o FILE]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	repo := flag.String("repo", ".", "The repository's root.")
	out := flag.String("o", "docs/api-reference.md", "The file to write, relative to -repo.")
	flag.Parse()
	crds, err := readCRDs(filepath.Join(*repo, "config", "crd", "bases"))
	if err == nil {
		err = os.WriteFile(filepath.Join(*repo, *out), []byte(Render(crds)), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "apidocs:", err)
		os.Exit(1)
	}
}
