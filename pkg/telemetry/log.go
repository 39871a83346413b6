package telemetry

import (
	"context"
	"log/slog"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
)

// Log attribute keys. Every chatd log line about a chat carries chat_id;
// the worker's lines carry worker_id, and a runner's lines runner_id too.
// Lines logged with a context inside a span carry trace_id and span_id
// (NewLogHandler).
const (
	LogChatID   = "chat_id"
	LogWorkerID = "worker_id"
	LogRunnerID = "runner_id"
	LogTraceID  = "trace_id"
	LogSpanID   = "span_id"
)

// ChatAttr is the chat_id attribute.
func ChatAttr(id uuid.UUID) slog.Attr { return slog.String(LogChatID, id.String()) }

// WorkerAttr is the worker_id attribute.
func WorkerAttr(id uuid.UUID) slog.Attr { return slog.String(LogWorkerID, id.String()) }

// RunnerAttr is the runner_id attribute.
func RunnerAttr(id uuid.UUID) slog.Attr { return slog.String(LogRunnerID, id.String()) }

// NewLogHandler wraps h so a record logged with a context inside a span
// (log.InfoContext(ctx, ...)) carries trace_id and span_id, which join the
// JSON logs to the traces.
func NewLogHandler(h slog.Handler) slog.Handler { return traceHandler{h} }

type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
