package testkit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/service"
)

// readyTimeout is how long StartService waits for a service to report Ready.
const readyTimeout = 30 * time.Second

// RunService starts run (a service's Run, with its config bound) as
// StartService does and returns its address. The service is stopped in
// t.Cleanup.
func RunService(t testing.TB, name string, run func(ctx context.Context, rt service.Runtime) error) string {
	t.Helper()
	return StartService(t, name, run).Addr
}

// Running is a service started by StartService.
type Running struct {
	// Addr is the loopback address the service listens on.
	Addr string

	t      testing.TB
	name   string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// Stop cancels the service's context and waits for its Run to return; an
// error from Run fails the test. Calls after the first do nothing.
func (r *Running) Stop() {
	r.once.Do(func() {
		r.cancel()
		if err := <-r.done; err != nil {
			r.t.Errorf("%s: Run returned %v", r.name, err)
		}
	})
}

// StartService starts run (a service's Run, with its config bound) on a
// loopback listener with a discarding logger, and waits until it reports
// Ready. A run that wants another logger sets rt.Logger before calling the
// service's Run. The service is stopped in t.Cleanup, or earlier with Stop.
// A Run that fails to start, is not ready within 30 s, or returns an error
// fails the test, each message naming the service.
func StartService(t testing.TB, name string, run func(ctx context.Context, rt service.Runtime) error) *Running {
	t.Helper()
	r, err := TryStartService(t, name, run)
	if err != nil {
		t.Fatalf("%s: Run: %v", name, err)
	}
	return r
}

// TryStartService is StartService for a test that expects the start to
// fail: when Run returns before Ready, it returns Run's error (and no
// Running) instead of failing the test.
func TryStartService(t testing.TB, name string, run func(ctx context.Context, rt service.Runtime) error) (*Running, error) {
	t.Helper()
	lis := Listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, service.Runtime{
			Logger:   slog.New(slog.DiscardHandler),
			Listener: lis,
			Ready:    func() { close(ready) },
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		if err == nil {
			err = errors.New("returned nil before Ready")
		}
		return nil, err
	case <-time.After(readyTimeout):
		cancel()
		t.Fatalf("%s not ready within %v", name, readyTimeout)
	}
	r := &Running{Addr: lis.Addr().String(), t: t, name: name, cancel: cancel, done: done}
	t.Cleanup(r.Stop)
	return r, nil
}
