package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// fakeService reports Ready, serves until ctx is done, then takes a moment
// to shut down before it sets stopped and returns err.
func fakeService(stopped *atomic.Bool, err error) func(context.Context, service.Runtime) error {
	return func(ctx context.Context, rt service.Runtime) error {
		rt.Ready()
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond)
		stopped.Store(true)
		return err
	}
}

// stopWithin calls r.Stop and fails the test if it has not returned within d.
func stopWithin(t *testing.T, r *testkit.Running, d time.Duration) {
	t.Helper()
	returned := make(chan struct{})
	go func() {
		r.Stop()
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(d):
		t.Fatalf("Stop did not return within %v", d)
	}
}

// Stop cancels Run's context and returns only once Run has returned; a
// second Stop returns at once.
func TestStartServiceStopWaitsForRun(t *testing.T) {
	var stopped atomic.Bool
	r := testkit.StartService(t, "fake", fakeService(&stopped, nil))
	if stopped.Load() {
		t.Fatal("Run returned before Stop")
	}
	stopWithin(t, r, 5*time.Second)
	if !stopped.Load() {
		t.Fatal("Stop returned before Run did")
	}
	stopWithin(t, r, time.Second)
}

// Addr is the listener Run serves on: it accepts connections while the
// service runs.
func TestStartServiceAddrIsDialable(t *testing.T) {
	var stopped atomic.Bool
	r := testkit.StartService(t, "fake", fakeService(&stopped, nil))
	conn, err := net.DialTimeout("tcp", r.Addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", r.Addr, err)
	}
	_ = conn.Close()
	stopWithin(t, r, 5*time.Second)
}

// The logger a run sets on rt is the one the service gets.
func TestStartServiceRunSeesRuntime(t *testing.T) {
	var got service.Runtime
	r := testkit.StartService(t, "fake", func(ctx context.Context, rt service.Runtime) error {
		got = rt
		rt.Ready()
		<-ctx.Done()
		return nil
	})
	stopWithin(t, r, 5*time.Second)
	if got.Logger == nil || got.Listener == nil || got.Listener.Addr().String() != r.Addr {
		t.Errorf("Run got %+v, want a logger and the listener on %s", got, r.Addr)
	}
}

// errorfTB records Errorf instead of failing the test.
type errorfTB struct {
	testing.TB
	errs atomic.Pointer[string]
}

func (e *errorfTB) Errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	e.errs.Store(&msg)
}

// An error Run returns at Stop is reported, naming the service.
func TestStartServiceStopReportsRunError(t *testing.T) {
	var stopped atomic.Bool
	tb := &errorfTB{TB: t}
	r := testkit.StartService(tb, "fake-svc", fakeService(&stopped, errors.New("flush failed")))
	stopWithin(t, r, 5*time.Second)
	msg := ""
	if p := tb.errs.Load(); p != nil {
		msg = *p
	}
	if !strings.Contains(msg, "fake-svc") || !strings.Contains(msg, "flush failed") {
		t.Errorf("Stop reported %q, want the service name and Run's error", msg)
	}
}

// A Run that fails before Ready: TryStartService returns its error.
func TestTryStartServiceReturnsStartError(t *testing.T) {
	boom := errors.New("bad config")
	r, err := testkit.TryStartService(t, "fake", func(context.Context, service.Runtime) error { return boom })
	if r != nil || !errors.Is(err, boom) {
		t.Errorf("TryStartService = %v, %v; want nil, %v", r, err, boom)
	}
	r, err = testkit.TryStartService(t, "fake", func(context.Context, service.Runtime) error { return nil })
	if r != nil || err == nil {
		t.Errorf("TryStartService with Run returning nil before Ready = %v, %v; want an error", r, err)
	}
}
