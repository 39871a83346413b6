package telemetry

import (
	"context"
	"runtime"
	"runtime/debug"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// MetricBuildInfo is the gauge every service exports (value 1), so each
// /metrics endpoint has a chatd_ series from the start, labeled with the
// service, its build version and Go version.
const MetricBuildInfo = "chatd_build_info"

// registerBuildInfo adds chatd_build_info{service, version, go_version} to
// mp.
func registerBuildInfo(mp metric.MeterProvider, service string) error {
	version := BuildVersion()
	attrs := metric.WithAttributes(attribute.String("service", service),
		attribute.String("version", version), attribute.String("go_version", runtime.Version()))
	_, err := mp.Meter(ScopeName).Int64ObservableGauge(MetricBuildInfo,
		metric.WithDescription("Always 1: the chatd service, its version and Go version."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(1, attrs)
			return nil
		}))
	return err
}

// BuildVersion is the binary's main module version as the Go toolchain
// recorded it ("(devel)" for a build from a checkout, "devel" without build
// information): the version label of chatd_build_info and the version of
// the hook dispatcher's User-Agent.
func BuildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}
