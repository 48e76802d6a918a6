package admission

import (
	"context"
	"fmt"
	"testing"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// One control plane for the package, with the shipped policy installed, started by the first test
// that needs it: the tests work in namespaces and as users of their own.
var shared = envtestutil.Shared{Setup: installShippedPolicy}

func TestMain(m *testing.M) { shared.Main(m) }

// policyEnv returns the package's control plane with config/default's admission policies and
// bindings created (they take effect asynchronously: each test waits for the rule it relies on).
func policyEnv(t *testing.T) *envtestutil.Env { return shared.Env(t) }

func installShippedPolicy(env *envtestutil.Env) error {
	objs, err := shippedPolicy(env)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		obj.SetNamespace("") // kustomize's namespace transformer does not know these kinds are cluster-scoped
		if err := env.Client.Create(context.Background(), obj); err != nil {
			return fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}
