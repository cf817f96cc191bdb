package telemetry

import (
	"context"
	"log/slog"
	"slices"
)

// DeferAttrs returns a handler that applies WithAttrs and WithGroup to h
// only when a record is handled. For a library that derives a logger per
// call for logs that are usually off: FerretDB's SQL layer calls
// Logger.With with every statement's arguments (whole documents) for a
// debug line, and a text or JSON handler formats those attributes in With,
// whether or not the line is ever written — about 4% of the embedded
// database's CPU. The price is paid per written record instead, which suits
// only loggers that write rarely.
func DeferAttrs(h slog.Handler) slog.Handler {
	return &deferredHandler{inner: h}
}

type deferredHandler struct {
	inner slog.Handler
	ops   []deferredOp // in the order they were asked for
}

// deferredOp is one WithGroup (group set) or WithAttrs.
type deferredOp struct {
	group string
	attrs []slog.Attr
}

func (h *deferredHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *deferredHandler) Handle(ctx context.Context, r slog.Record) error {
	in := h.inner
	for _, op := range h.ops {
		if op.group != "" {
			in = in.WithGroup(op.group)
		} else {
			in = in.WithAttrs(op.attrs)
		}
	}
	return in.Handle(ctx, r)
}

func (h *deferredHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return &deferredHandler{inner: h.inner, ops: append(slices.Clip(h.ops), deferredOp{attrs: attrs})}
}

func (h *deferredHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &deferredHandler{inner: h.inner, ops: append(slices.Clip(h.ops), deferredOp{group: name})}
}
