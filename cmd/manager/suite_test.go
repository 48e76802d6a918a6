package main

import (
	"testing"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// One control plane for the package, started by the first test that needs one: the tests use names
// of their own (the manager's Lease, the metrics ServiceAccounts, the dry-run applies' namespaces).
var shared envtestutil.Shared

func TestMain(m *testing.M) { shared.Main(m) }

// startEnv returns the package's control plane.
func startEnv(t *testing.T) *envtestutil.Env { return shared.Env(t) }
