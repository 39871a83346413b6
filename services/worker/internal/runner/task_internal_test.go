package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/chatstate"
)

func TestSuperviseRetriesUnexpectedErrorsWithBackoff(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	r := &runner{cfg: Config{RetryBaseDelay: time.Second, RetryMaxDelay: 3 * time.Second}.withDefaults(), clock: clock}
	var calls atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.supervise(context.Background(), slog.Default(), func(context.Context) error {
			if calls.Add(1) <= 3 {
				return errors.New("connection refused")
			}
			return nil
		})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, wait := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		clock.Advance(wait - time.Nanosecond)
		require.Never(t, func() bool { return calls.Load() > int32(wait/time.Second) }, 20*time.Millisecond, time.Millisecond)
		clock.Advance(time.Nanosecond)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("supervise did not return after success")
	}
	require.Equal(t, int32(4), calls.Load())
}

func TestSuperviseExpectedExits(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		nil,
		fmt.Errorf("x: %w", chatstate.ErrFenced),
		fmt.Errorf("x: %w", chatstate.ErrChatNotFound),
	} {
		r := &runner{cfg: Config{}.withDefaults(), clock: clockwork.NewFakeClock()}
		calls := 0
		r.supervise(context.Background(), slog.Default(), func(context.Context) error { calls++; return err })
		require.Equal(t, 1, calls, "%v", err)
	}
	// A cancelled context ends the retries.
	r := &runner{cfg: Config{}.withDefaults(), clock: clockwork.NewFakeClock()}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	r.supervise(ctx, slog.Default(), func(context.Context) error { calls++; cancel(); return errors.New("boom") })
	require.Equal(t, 1, calls)
}
