package acquire_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/services/worker/internal/acquire"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

func TestAcquisitionMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tenant.Chats(t, b.pool, 2, "running", nil)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	loop := acquire.New(b.pool, chatstate.New(b.pool, chatstate.Config{}), nil,
		spawnFunc(func(runner.Spec) error { return nil }),
		acquire.Config{WorkerID: uuid.New(), Lease: lease, Limits: acquire.Limits{MaxRootChats: 1}, MeterProvider: mp})

	st, err := loop.Pass(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, st.Acquired)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	results := map[string]int64{}
	var passes uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case acquire.MetricAcquisitions:
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					r, _ := p.Attributes.Value("result")
					results[r.AsString()] += p.Value
				}
			case acquire.MetricPassDuration:
				for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					passes += p.Count
				}
			}
		}
	}
	require.Equal(t, map[string]int64{acquire.ResultAcquired: 1, acquire.ResultNoCapacity: 1}, results)
	require.Equal(t, uint64(1), passes)
}
