package envtestutil

import (
	"context"
	"os"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Shared is a test package's one control plane: started by the first test that asks for it (a
// package whose tests need none starts none), stopped by Main when the package's tests end.
type Shared struct {
	// CRDDirs, when set, gives directories of CRDs to install besides the project's (a pinned
	// release's); it may fail the test that asks first.
	CRDDirs func(testing.TB) []string
	// Setup, when set, prepares the control plane once after it starts (objects every test relies on).
	Setup func(*Env) error

	once sync.Once
	env  *Env
	err  error
}

// Env returns the package's control plane, starting it on first use; a failure to start fails
// every test that asks.
func (s *Shared) Env(t testing.TB) *Env {
	t.Helper()
	var dirs []string
	if s.CRDDirs != nil {
		dirs = s.CRDDirs(t)
	}
	s.once.Do(func() {
		if s.env, s.err = Start(dirs...); s.err == nil && s.Setup != nil {
			s.err = s.Setup(s.env)
		}
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.env
}

// Main runs the package's tests, stops the control plane if one was started, and exits: call it
// from TestMain.
func (s *Shared) Main(m *testing.M) {
	code := m.Run()
	if s.env != nil {
		_ = s.env.Stop()
	}
	os.Exit(code)
}

// CreateNamespaces is a Setup that creates the namespaces names (those that exist are fine).
func CreateNamespaces(names ...string) func(*Env) error {
	return func(env *Env) error {
		for _, ns := range names {
			err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
		}
		return nil
	}
}
