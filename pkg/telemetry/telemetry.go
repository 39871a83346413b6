// Package telemetry is the observability runtime every chatd service shares:
// an OpenTelemetry TracerProvider and MeterProvider (Setup), the Prometheus
// /metrics handler that serves the meter's instruments, OTLP export when the
// standard OTEL_EXPORTER_OTLP_* variables ask for it, the lifecycle stage
// tracer (Stages, spec "Lifecycle tracing" and "Stages"), and the log
// attribute conventions (log.go).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// MetricsPath is where the Prometheus handler is mounted.
const MetricsPath = "/metrics"

// Options configure Setup. The zero value is production: a Prometheus
// registry, and OTLP export only when the environment asks for it.
type Options struct {
	// SpanExporter, when set, receives every ended span synchronously (a
	// tracetest.InMemoryExporter in tests). It is used besides OTLP.
	SpanExporter sdktrace.SpanExporter
	// SpanProcessor, when set, is registered too (a tracetest.SpanRecorder
	// in tests).
	SpanProcessor sdktrace.SpanProcessor
	// MetricReader, when set, is registered besides the Prometheus exporter
	// (a sdkmetric.ManualReader in tests).
	MetricReader sdkmetric.Reader
	// Registry is the Prometheus registry the exporter registers with and
	// the handler serves; a new one (with the Go and process collectors)
	// when nil.
	Registry *prometheus.Registry
	// LookupEnv reads the OTEL_* variables; os.LookupEnv when nil.
	LookupEnv func(string) (string, bool)
	// SetGlobal makes the providers the otel globals (otel.SetTracerProvider,
	// otel.SetMeterProvider, the W3C propagator), for libraries that only
	// use the globals. Binaries set it; tests leave it off.
	SetGlobal bool
}

// Telemetry is what Setup built.
type Telemetry struct {
	TracerProvider *sdktrace.TracerProvider
	MeterProvider  *sdkmetric.MeterProvider
	// Registry holds the exporter's collector (and the Go and process
	// collectors when Setup made it).
	Registry *prometheus.Registry
	// Handler serves Registry in the Prometheus text (or OpenMetrics)
	// format; mount it at MetricsPath.
	Handler http.Handler
	// OTLPTraces and OTLPMetrics report whether OTLP export is on.
	OTLPTraces, OTLPMetrics bool

	shutdown []func(context.Context) error
}

// Shutdown flushes and stops the providers and exporters. Call it once,
// after the service stopped, with a bounded context.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for i := len(t.shutdown) - 1; i >= 0; i-- {
		errs = append(errs, t.shutdown[i](ctx))
	}
	return errors.Join(errs...)
}

// Setup builds the providers of service serviceName ("worker" → resource
// service.name "chatd-worker" unless OTEL_SERVICE_NAME says otherwise).
//
// OTLP: traces are exported when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, metrics when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is set.
// The protocol is OTEL_EXPORTER_OTLP_PROTOCOL (or the per-signal variable):
// grpc, or http/protobuf (the default). OTEL_SDK_DISABLED=true, or
// OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER set to none, turns OTLP off
// for all or one signal. Every other OTEL_EXPORTER_OTLP_* variable (headers,
// timeout, insecure, certificates) is read by the exporters themselves.
// The Prometheus handler always works.
func Setup(ctx context.Context, serviceName string, opts Options) (*Telemetry, error) {
	env := opts.LookupEnv
	if env == nil {
		env = os.LookupEnv
	}
	get := func(k string) string { v, _ := env(k); return strings.TrimSpace(v) }

	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "chatd-"+serviceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID())
	if err != nil && res == nil {
		return nil, fmt.Errorf("error building the telemetry resource: %w", err)
	}

	t := &Telemetry{Registry: opts.Registry}
	if t.Registry == nil {
		t.Registry = prometheus.NewRegistry()
		t.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	t.Handler = promhttp.HandlerFor(t.Registry, promhttp.HandlerOpts{EnableOpenMetrics: true})

	disabled := strings.EqualFold(get("OTEL_SDK_DISABLED"), "true")
	endpoint := get("OTEL_EXPORTER_OTLP_ENDPOINT")
	t.OTLPTraces = !disabled && get("OTEL_TRACES_EXPORTER") != "none" &&
		(endpoint != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "")
	t.OTLPMetrics = !disabled && get("OTEL_METRICS_EXPORTER") != "none" &&
		(endpoint != "" || get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != "")
	protocol := func(signal string) string {
		if p := get("OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"); p != "" {
			return p
		}
		if p := get("OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" {
			return p
		}
		return "http/protobuf"
	}

	if err := t.setupMetrics(ctx, serviceName, res, protocol("METRICS"), opts); err != nil {
		_ = t.Shutdown(ctx)
		return nil, err
	}
	if err := t.setupTraces(ctx, res, protocol("TRACES"), opts); err != nil {
		_ = t.Shutdown(ctx)
		return nil, err
	}
	if opts.SetGlobal {
		otel.SetTracerProvider(t.TracerProvider)
		otel.SetMeterProvider(t.MeterProvider)
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	}
	return t, nil
}

// setupMetrics builds the meter provider: the Prometheus exporter, OTLP
// over protocol when asked, the test reader.
func (t *Telemetry) setupMetrics(ctx context.Context, serviceName string, res *resource.Resource, protocol string, opts Options) error {
	promExp, err := otelprom.New(otelprom.WithRegisterer(t.Registry), otelprom.WithoutScopeInfo())
	if err != nil {
		return fmt.Errorf("error creating the Prometheus exporter: %w", err)
	}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(promExp)}
	if t.OTLPMetrics {
		var exp sdkmetric.Exporter
		switch protocol {
		case "grpc":
			exp, err = otlpmetricgrpc.New(ctx)
		case "http/protobuf":
			exp, err = otlpmetrichttp.New(ctx)
		default:
			err = fmt.Errorf("unsupported OTLP protocol %q (grpc or http/protobuf)", protocol)
		}
		if err != nil {
			return fmt.Errorf("error creating the OTLP metric exporter: %w", err)
		}
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	if opts.MetricReader != nil {
		mopts = append(mopts, sdkmetric.WithReader(opts.MetricReader))
	}
	t.MeterProvider = sdkmetric.NewMeterProvider(mopts...)
	t.shutdown = append(t.shutdown, t.MeterProvider.Shutdown)
	if err := registerBuildInfo(t.MeterProvider, serviceName); err != nil {
		return fmt.Errorf("error registering %s: %w", MetricBuildInfo, err)
	}
	return nil
}

// setupTraces builds the tracer provider: OTLP over protocol when asked,
// the test exporter and processor.
func (t *Telemetry) setupTraces(ctx context.Context, res *resource.Resource, protocol string, opts Options) error {
	topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if t.OTLPTraces {
		var exp sdktrace.SpanExporter
		var err error
		switch protocol {
		case "grpc":
			exp, err = otlptracegrpc.New(ctx)
		case "http/protobuf":
			exp, err = otlptracehttp.New(ctx)
		default:
			err = fmt.Errorf("unsupported OTLP protocol %q (grpc or http/protobuf)", protocol)
		}
		if err != nil {
			return fmt.Errorf("error creating the OTLP span exporter: %w", err)
		}
		topts = append(topts, sdktrace.WithBatcher(exp))
	}
	if opts.SpanExporter != nil {
		topts = append(topts, sdktrace.WithSyncer(opts.SpanExporter))
	}
	if opts.SpanProcessor != nil {
		topts = append(topts, sdktrace.WithSpanProcessor(opts.SpanProcessor))
	}
	if !t.OTLPTraces && opts.SpanExporter == nil && opts.SpanProcessor == nil {
		// Spans nobody receives are not recorded: each is then only its
		// context (the trace and span IDs the logs carry). A worker holds
		// a turn, step and stream span open for every running chat, for
		// minutes; recorded, with their attributes, they cost KiBs a chat.
		topts = append(topts, sdktrace.WithSampler(sdktrace.NeverSample()))
	}
	t.TracerProvider = sdktrace.NewTracerProvider(topts...)
	t.shutdown = append(t.shutdown, t.TracerProvider.Shutdown)
	return nil
}
