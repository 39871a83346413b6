package agenttools

import (
	"context"
	"sync"
)

type fatalKey struct{}

type fatalSlot struct {
	mu  sync.Mutex
	err error
}

// WithFatal returns a context on which a tool can report a failure that
// must end the turn in error once the step's results are committed (spec
// "Plan failure recovery": a failed lifecycle hook dispatch inside a tool,
// such as the user_prompt_submit of a subagent spawn), and a function that
// returns the first failure reported.
func WithFatal(ctx context.Context) (context.Context, func() error) {
	slot := &fatalSlot{}
	return context.WithValue(ctx, fatalKey{}, slot), func() error {
		slot.mu.Lock()
		defer slot.mu.Unlock()
		return slot.err
	}
}

// ReportFatal reports err on ctx (see WithFatal). It returns false when no
// caller listens; the tool's own result is then all that is known.
func ReportFatal(ctx context.Context, err error) bool {
	slot, ok := ctx.Value(fatalKey{}).(*fatalSlot)
	if !ok || err == nil {
		return false
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.err == nil {
		slot.err = err
	}
	return true
}
