// Command dashboard writes the operator's Grafana dashboard (internal/dashboard) as JSON, and draws
// its panels from a Prometheus server's data as an SVG.
//
//	go run ./hack/dashboard generate [-o config/grafana/retry-operator-dashboard.json]
//	go run ./hack/dashboard render -prometheus http://127.0.0.1:9090 [-range 15m] [-o docs/dashboard.svg]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/retryops/retry-operator/internal/dashboard"
)

// DashboardFile is where `make dashboard` writes the dashboard, from the module root.
const DashboardFile = "config/grafana/retry-operator-dashboard.json"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dashboard generate [-o file] | render -prometheus URL [-range d] [-o file]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "generate":
		fs := flag.NewFlagSet("generate", flag.ExitOnError)
		out := fs.String("o", DashboardFile, "File to write the dashboard JSON to.")
		_ = fs.Parse(os.Args[2:])
		err = generate(*out)
	case "render":
		err = renderCommand(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

func generate(path string) error {
	b, err := dashboard.JSON()
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
