package v1alpha1_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// env is the envtest control plane shared by the tests of this package.
var env *envtestutil.Env

func TestMain(m *testing.M) {
	var err error
	if env, err = envtestutil.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "envtest:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping envtest:", err)
	}
	os.Exit(code)
}
