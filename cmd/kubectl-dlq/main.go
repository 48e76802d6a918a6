// Command kubectl-dlq is the kubectl dlq plugin: list, show and export the dead letters of a
// DeadLetterQueue, replay, resolve, ignore or purge them through DeadLetterActions, and show their
// statistics, under the user's kubeconfig identity. Install it on the PATH (go install
// github.com/retryops/retry-operator/cmd/kubectl-dlq@latest, or krew with plugins/dlq.yaml) and run
// kubectl dlq --help.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/retryops/retry-operator/internal/dlqcli"
)

func main() {
	os.Exit(dlqcli.Main(os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}
