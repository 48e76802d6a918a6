// Package dlqcli is the kubectl dlq plugin: everyday dead-letter work in a terminal. It reads dead
// letters only through the deadletters aggregated API (deadletters.retryops.dev) and changes them only
// by creating DeadLetterActions (retry.retryops.dev), both under the user's kubeconfig identity and
// RBAC: it holds no Kafka credentials and has no power of its own.
//
// The command tree is cobra's, the kubeconfig flags and -o k8s.io/cli-runtime's, one file per
// concern: root.go (the commands, exit codes and errors), client.go (REST clients per group
// version), selector.go (the filters as the console's dlqui.Filter), act.go (replay, resolve,
// ignore and purge: their flags as a dlqui.ActionRequest), wait.go (--wait), letters.go, rows.go and
// export.go (the dead letters listed, shown and exported), stats.go, actions.go, output.go (-o
// through cli-runtime's PrintFlags and printers), escape.go (everything a dead letter holds passed
// through internal/termsafe before a terminal shows it) and ui.go (kubectl dlq ui, the console of
// internal/dlqui on these clients). It imports, of the repository, the two API packages,
// internal/dlqui and internal/termsafe: never Kafka, controller-runtime, the controllers or the
// dead-letter engine.
package dlqcli
