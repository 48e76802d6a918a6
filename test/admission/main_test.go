package admission

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// One control plane for the package, with the shipped policy installed, started by the first test
// that needs it: the tests work in namespaces and as users of their own.
var (
	envOnce sync.Once
	env     *envtestutil.Env
	envErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

// policyEnv returns the package's control plane with config/default's admission policies and
// bindings created (they take effect asynchronously: each test waits for the rule it relies on).
func policyEnv(t *testing.T) *envtestutil.Env {
	t.Helper()
	envOnce.Do(func() {
		if env, envErr = envtestutil.Start(); envErr != nil {
			return
		}
		objs, err := shippedPolicy(env)
		if err != nil {
			envErr = err
			return
		}
		for _, obj := range objs {
			obj.SetNamespace("") // kustomize's namespace transformer does not know these kinds are cluster-scoped
			if err := env.Client.Create(context.Background(), obj); err != nil {
				envErr = fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
				return
			}
		}
	})
	if envErr != nil {
		t.Fatal(envErr)
	}
	return env
}
