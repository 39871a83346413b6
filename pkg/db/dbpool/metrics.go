package dbpool

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names of a pool, labelled pool=<the sessions' application_name>.
const (
	// MetricAcquiredConns is the connections in use now.
	MetricAcquiredConns = "chatd_db_pool_acquired_connections"
	// MetricMaxConns is the pool's size.
	MetricMaxConns = "chatd_db_pool_max_connections"
	// MetricEmptyAcquires counts the acquisitions that waited because
	// every connection was in use.
	MetricEmptyAcquires = "chatd_db_pool_empty_acquire_total"
	// MetricEmptyAcquireWait is the total time those acquisitions waited.
	MetricEmptyAcquireWait = "chatd_db_pool_empty_acquire_wait_seconds_total"
)

// observe registers pool's statistics with mp, read at every collection.
func observe(mp metric.MeterProvider, name string, pool *pgxpool.Pool) error {
	m := mp.Meter("github.com/chatd/chatd")
	acquired, err := m.Int64ObservableGauge(MetricAcquiredConns, metric.WithDescription("Postgres connections in use, by pool."))
	if err != nil {
		return err
	}
	size, err := m.Int64ObservableGauge(MetricMaxConns, metric.WithDescription("Postgres pool size, by pool."))
	if err != nil {
		return err
	}
	empty, err := m.Int64ObservableCounter(MetricEmptyAcquires, metric.WithDescription("Pool acquisitions that waited for a connection because all were in use, by pool."))
	if err != nil {
		return err
	}
	// No unit: the exporter would append _seconds after _total.
	wait, err := m.Float64ObservableCounter(MetricEmptyAcquireWait,
		metric.WithDescription("Total time pool acquisitions waited for a connection because all were in use, by pool."))
	if err != nil {
		return err
	}
	attrs := metric.WithAttributes(attribute.String("pool", name))
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := pool.Stat()
		o.ObserveInt64(acquired, int64(s.AcquiredConns()), attrs)
		o.ObserveInt64(size, int64(s.MaxConns()), attrs)
		o.ObserveInt64(empty, s.EmptyAcquireCount(), attrs)
		o.ObserveFloat64(wait, s.EmptyAcquireWaitTime().Seconds(), attrs)
		return nil
	}, acquired, size, empty, wait)
	if err != nil {
		return fmt.Errorf("register the pool metrics: %w", err)
	}
	return nil
}
