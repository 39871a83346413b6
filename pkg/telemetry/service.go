package telemetry

import (
	"context"
	"log/slog"
	"time"
)

// shutdownTimeout bounds the final flush of a service's telemetry.
const shutdownTimeout = 5 * time.Second

// StartService is Setup as every chatd service calls it: the otel globals
// are set unless the service is hosted beside others in one process
// (chatd dev, where four services must not overwrite them in turn). stop
// flushes and shuts the providers down, logging a failure.
func StartService(ctx context.Context, name string, hosted bool, log *slog.Logger) (t *Telemetry, stop func(), err error) {
	t, err = Setup(ctx, name, Options{SetGlobal: !hosted})
	if err != nil {
		return nil, nil, err
	}
	return t, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		if err := t.Shutdown(sctx); err != nil {
			log.Warn("telemetry shutdown", "error", err.Error())
		}
	}, nil
}
