package agenttools

import "context"

// Progress is a running call's report of how far it got: Progress of Total
// (0: unknown), with an optional message (MCP notifications/progress).
type Progress struct {
	Progress, Total float64
	Message         string
}

type progressKey struct{}

// WithProgress returns ctx carrying report, which a tool calls (from any
// goroutine) with the progress of the call it runs on ctx.
func WithProgress(ctx context.Context, report func(Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, report)
}

// ReportProgress reports p for the call running on ctx; it does nothing
// when no one listens.
func ReportProgress(ctx context.Context, p Progress) {
	if report, ok := ctx.Value(progressKey{}).(func(Progress)); ok && report != nil {
		report(p)
	}
}

// ProgressListener is the report function ctx carries, or nil.
func ProgressListener(ctx context.Context) func(Progress) {
	report, _ := ctx.Value(progressKey{}).(func(Progress))
	return report
}
