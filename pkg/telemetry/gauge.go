package telemetry

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/metric"
)

// Metric names of the gauges the stream and the relay export.
const (
	// MetricStreamWatchers is the stream replica's open chat streams
	// (SSE and WebSocket connections).
	MetricStreamWatchers = "chatd_stream_watchers"
	// MetricRelayUpstreams is the relay's open upstream PartsService
	// streams (one per worker and chat with subscribers).
	MetricRelayUpstreams = "chatd_relay_upstreams"
)

// ObserveGauge registers an integer gauge named name on mp whose value is
// read from value at every collection.
func ObserveGauge(mp metric.MeterProvider, name, description string, value func() int64) error {
	_, err := mp.Meter(ScopeName).Int64ObservableGauge(name, metric.WithDescription(description),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(value())
			return nil
		}))
	if err != nil {
		return fmt.Errorf("register %s: %w", name, err)
	}
	return nil
}
