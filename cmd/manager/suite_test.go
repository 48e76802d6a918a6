package main

import (
	"os"
	"sync"
	"testing"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// One control plane for the package, started by the first test that needs one: the tests use names
// of their own (the manager's Lease, the metrics ServiceAccounts, the dry-run applies' namespaces).
var (
	envOnce   sync.Once
	sharedEnv *envtestutil.Env
	envErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedEnv != nil {
		_ = sharedEnv.Stop()
	}
	os.Exit(code)
}

// startEnv returns the package's control plane.
func startEnv(t *testing.T) *envtestutil.Env {
	t.Helper()
	envOnce.Do(func() { sharedEnv, envErr = envtestutil.Start() })
	if envErr != nil {
		t.Fatal(envErr)
	}
	return sharedEnv
}
