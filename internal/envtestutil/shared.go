package envtestutil

import (
	"os"
	"sync"
	"testing"
)

// Shared is a test package's one control plane: started by the first test that asks for it (a
// package whose tests need none starts none), stopped by Main when the package's tests end.
type Shared struct {
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
	s.once.Do(func() {
		if s.env, s.err = Start(); s.err == nil && s.Setup != nil {
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
