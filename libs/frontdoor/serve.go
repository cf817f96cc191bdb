package frontdoor

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Serve serves h on lis until ctx ends, then shuts down: new connections
// are refused and requests in flight get grace to finish, after which
// their contexts are cancelled and their connections closed. Requests run
// under a context of their own (ctx's values, not its end), so work in
// flight can finish after ctx ends. ready, if set, is called once lis
// serves. Serve returns nil after a shutdown, else why serving stopped.
func Serve(ctx context.Context, lis net.Listener, h http.Handler, log *slog.Logger, grace time.Duration, ready func()) error {
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	if ready != nil {
		ready()
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "addr", lis.Addr().String(), "grace", grace.String())
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("grace period over; cancelling the requests still running", "addr", lis.Addr().String(), "error", err)
		cancelRequests()
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
