package acquire

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/chatd/chatd/pkg/telemetry"
)

// Metric names of the acquisition loop.
const (
	// MetricAcquisitions counts TryAcquire outcomes by result: acquired (an
	// unowned chat), taken_over (a stale owner's chat), no_capacity
	// (admission refused it), error (the attempt failed).
	MetricAcquisitions = "chatd_acquisitions_total"
	// MetricPassDuration is how long one full acquisition pass took.
	MetricPassDuration = "chatd_acquisition_pass_duration_seconds"
	// MetricCandidates is how many runnable chats the last pass found
	// without a live owner (up to the batch size), by owner: none (never
	// acquired or released) or stale (owned, but the lease lapsed: the
	// owner is gone or stuck). Both should drop to 0 within a pass or two.
	MetricCandidates = "chatd_acquisition_candidates"
)

// Results of MetricAcquisitions.
const (
	ResultAcquired   = "acquired"
	ResultTakenOver  = "taken_over"
	ResultNoCapacity = "no_capacity"
	ResultError      = "error"
)

// metrics are the loop's instruments.
type metrics struct {
	acquisitions metric.Int64Counter
	passes       metric.Float64Histogram
	candidates   metric.Int64Gauge
}

func newMetrics(mp metric.MeterProvider) metrics {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(telemetry.ScopeName)
	acq, err := m.Int64Counter(MetricAcquisitions,
		metric.WithDescription("Chat acquisition attempts by result (acquired, taken_over, no_capacity, error)."))
	if err != nil {
		otel.Handle(err)
	}
	passes, err := m.Float64Histogram(MetricPassDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of one full acquisition pass over the candidates."),
		metric.WithExplicitBucketBoundaries(telemetry.DurationBuckets...))
	if err != nil {
		otel.Handle(err)
	}
	cands, err := m.Int64Gauge(MetricCandidates,
		metric.WithDescription("Runnable chats without a live owner found by the last acquisition pass, by owner (none, stale)."))
	if err != nil {
		otel.Handle(err)
	}
	return metrics{acquisitions: acq, passes: passes, candidates: cands}
}

func (m metrics) count(result string) {
	m.acquisitions.Add(context.Background(), 1, metric.WithAttributes(attribute.String("result", result)))
}

func (m metrics) pass(d time.Duration) { m.passes.Record(context.Background(), d.Seconds()) }

func (m metrics) found(unowned, stale int) {
	m.candidates.Record(context.Background(), int64(unowned), metric.WithAttributes(attribute.String("owner", "none")))
	m.candidates.Record(context.Background(), int64(stale), metric.WithAttributes(attribute.String("owner", "stale")))
}
