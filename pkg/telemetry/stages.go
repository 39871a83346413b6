package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of chatd's tracer and meter.
const ScopeName = "github.com/chatd/chatd"

// Stage names (spec "Stages"); each is also its span's name.
const (
	StageChatTurn        = "chat_turn"
	StageAcquisition     = "acquisition"
	StageQueueWait       = "queue_wait"
	StageGenerationStep  = "generation_step"
	StagePrepare         = "prepare"
	StageMCPConnect      = "mcp_connect"
	StageStream          = "stream"
	StageTTFT            = "time_to_first_token"
	StageProviderAttempt = "provider_attempt"
	StageThinking        = "thinking"
	StageToolCall        = "tool_call"
	StageCommit          = "commit"
	StageRetryBackoff    = "retry_backoff"
	StageCompaction      = "compaction"
)

// Scopes and chat kinds (the scope and chat_kind labels).
const (
	ScopeTurn        = "turn"
	ScopeBackground  = "background"
	ChatKindRoot     = "root"
	ChatKindSubagent = "subagent"
)

// Turn outcomes (the turn_outcome attribute and the outcome label).
const (
	OutcomeCompleted   = "completed"
	OutcomeError       = "error"
	OutcomeInterrupted = "interrupted"
	OutcomeAbandoned   = "abandoned"
)

// AnomalyStaleAnchor is the reason of a turn whose trigger is at or before
// the previous turn's anchor.
const AnomalyStaleAnchor = "stale_anchor"

// Metric names, as Prometheus exposes them. The spec's coderd_chatd_ prefix
// is chatd_ here.
const (
	MetricStageDuration      = "chatd_stage_duration_seconds"
	MetricModelStageDuration = "chatd_model_stage_duration_seconds"
	MetricTTFT               = "chatd_ttft_seconds"
	MetricTurnOutcomes       = "chatd_turn_outcomes_total"
	MetricStageAnomalies     = "chatd_stage_anomalies_total"
	// MetricProviderErrors counts the provider attempts (HTTP round trips
	// to a model provider) that failed, by provider_type, model and kind
	// (transport, http_429, http_4xx, http_5xx); the attempts themselves
	// are the provider_attempt observations of MetricModelStageDuration.
	MetricProviderErrors = "chatd_provider_errors_total"
)

// Attribute keys of stage spans and metric labels.
const (
	AttrStage            = "stage"
	AttrScope            = "scope"
	AttrChatKind         = "chat_kind"
	AttrProvider         = "provider"
	AttrProviderType     = "provider_type"
	AttrModel            = "model"
	AttrReasoningEffort  = "reasoning_effort"
	AttrGenerationAction = "generation_action"
	AttrToolName         = "tool_name"
	AttrTurnOutcome      = "turn_outcome"
	AttrOutcome          = "outcome"
	AttrReason           = "reason"
	AttrAttempt          = "attempt"
	AttrChatID           = "chat_id"
)

// DurationBuckets are the stage histograms' bucket bounds in seconds: from
// a fast commit to a long agent turn.
var DurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// observed are the stages the histogram observes; the others (generation_step,
// prepare, thinking, compaction) are span-only.
var observed = map[string]bool{
	StageChatTurn: true, StageQueueWait: true, StageAcquisition: true, StageMCPConnect: true,
	StageStream: true, StageTTFT: true, StageProviderAttempt: true, StageToolCall: true,
	StageCommit: true, StageRetryBackoff: true,
}

// modelStages are the provider's work on a model, observed a second time on
// the model family when turn-scoped.
var modelStages = map[string]bool{StageStream: true, StageProviderAttempt: true}

// StageModel is the model a stage runs on (spec chatloop.StageModel).
type StageModel struct {
	// Provider is the model's wire protocol (openai, anthropic, scripted).
	Provider string
	// ProviderType is the configured type of the model's provider
	// (openai-compat, openai, anthropic, scripted).
	ProviderType string
	// Model is the provider's model name.
	Model string
	// ReasoningEffort is the effort the call asked for; "" when none.
	ReasoningEffort string
}

// Attributes are the model's span attributes: provider, provider_type,
// model and reasoning_effort.
func (m StageModel) Attributes() []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String(AttrProvider, m.Provider), attribute.String(AttrProviderType, m.ProviderType),
		attribute.String(AttrModel, m.Model), attribute.String(AttrReasoningEffort, m.ReasoningEffort),
	}
}

// Identity is what every stage carries: its scope and chat kind.
type Identity struct {
	Scope    string // ScopeTurn or ScopeBackground
	ChatKind string // ChatKindRoot, ChatKindSubagent, or "" when unknown
}

type (
	identityKey struct{}
	modelKey    struct{}
)

// WithStageModel records on ctx the model the work on it runs on, for
// stages started deeper down (tool_call, thinking) to read with
// StageModelFrom.
func WithStageModel(ctx context.Context, m StageModel) context.Context {
	return context.WithValue(ctx, modelKey{}, m)
}

// StageModelFrom is the model WithStageModel put on ctx.
func StageModelFrom(ctx context.Context) (StageModel, bool) {
	m, ok := ctx.Value(modelKey{}).(StageModel)
	return m, ok
}

// WithStageIdentity puts the scope and chat kind of the stages started on
// the returned context.
func WithStageIdentity(ctx context.Context, scope, chatKind string) context.Context {
	return context.WithValue(ctx, identityKey{}, Identity{Scope: scope, ChatKind: chatKind})
}

// StageIdentity is the identity on ctx; scope turn and an unknown chat kind
// when none was set.
func StageIdentity(ctx context.Context) Identity {
	if id, ok := ctx.Value(identityKey{}).(Identity); ok {
		return id
	}
	return Identity{Scope: ScopeTurn}
}

// Detach returns a context for work detached from the turn (title, summary,
// status label generation): the span context is stripped and the scope is
// background, so its stages start their own trace roots. Cancellation and
// the chat kind are kept.
func Detach(ctx context.Context) context.Context {
	ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	return WithStageIdentity(ctx, ScopeBackground, StageIdentity(ctx).ChatKind)
}

// ChatKind names a chat's kind from whether it has a parent.
func ChatKind(hasParent bool) string {
	if hasParent {
		return ChatKindSubagent
	}
	return ChatKindRoot
}

// Stages emits lifecycle stages: each stage is one span and, for the stages
// the spec lists, one histogram observation, both from a single End, so
// the trace and metric durations cannot disagree (spec chatloop.StageTracer).
// The zero value is not usable; a nil *Stages is (it records nothing).
type Stages struct {
	tracer    trace.Tracer
	now       func() time.Time
	stage     metric.Float64Histogram
	model     metric.Float64Histogram
	ttft      metric.Float64Histogram
	outcomes  metric.Int64Counter
	anomalies metric.Int64Counter
	provErrs  metric.Int64Counter
}

// StagesOptions configure NewStages.
type StagesOptions struct {
	// TracerProvider emits the spans; the otel global when nil. Use
	// DisableSpans to turn spans off but keep the histograms.
	TracerProvider trace.TracerProvider
	// DisableSpans emits no spans; metrics are still recorded.
	DisableSpans bool
	// MeterProvider records the metrics; the otel global when nil.
	MeterProvider metric.MeterProvider
	// DisableMetrics registers no stage metric family (the
	// chat-stage-metrics experiment is off); spans are still emitted.
	DisableMetrics bool
	// Now is the clock of the stages' timestamps; time.Now when nil.
	Now func() time.Time
}

// NewStages creates the stage instruments on o's providers. Instrument
// creation errors are reported to otel.Handle and leave a no-op instrument.
func NewStages(o StagesOptions) *Stages {
	tp := o.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if o.DisableSpans {
		tp = noop.NewTracerProvider()
	}
	mp := o.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if o.DisableMetrics {
		mp = metricnoop.NewMeterProvider()
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	m := mp.Meter(ScopeName)
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(DurationBuckets...))
		if err != nil {
			otel.Handle(err)
		}
		if h == nil {
			h, _ = metricnoop.NewMeterProvider().Meter(ScopeName).Float64Histogram(name)
		}
		return h
	}
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc))
		if err != nil {
			otel.Handle(err)
		}
		if c == nil {
			c, _ = metricnoop.NewMeterProvider().Meter(ScopeName).Int64Counter(name)
		}
		return c
	}
	anomalies := counter(MetricStageAnomalies, "Stage recording anomalies by reason (stale_anchor).")
	// Exported at zero from the start: a dashboard or alert on the rate of
	// a counter that appears only with its first event sees no data, not
	// 0, until then (Prometheus' advice: initialise the known label
	// values).
	anomalies.Add(context.Background(), 0, metric.WithAttributes(attribute.String(AttrReason, AnomalyStaleAnchor)))
	return &Stages{
		tracer: tp.Tracer(ScopeName),
		now:    now,
		stage:  hist(MetricStageDuration, "Duration of a chat lifecycle stage, by stage, scope and chat kind."),
		model: hist(MetricModelStageDuration,
			"Duration of the turn-scoped stages that are the provider's work on a model (stream, provider_attempt), by model."),
		ttft:      hist(MetricTTFT, "Time from opening a model request to its first streamed output part, by model."),
		outcomes:  counter(MetricTurnOutcomes, "Closed chat turns by outcome (completed, error, interrupted, abandoned) and chat kind."),
		anomalies: anomalies,
		provErrs:  counter(MetricProviderErrors, "Failed provider attempts by provider type, model and kind (transport, http_429, http_4xx, http_5xx)."),
	}
}

// Now is the stages' clock.
func (s *Stages) Now() time.Time {
	if s == nil {
		return time.Now()
	}
	return s.now()
}

// StageOption adjusts one stage.
type StageOption func(*stageConfig)

type stageConfig struct {
	start time.Time
	root  bool
	attrs []attribute.KeyValue
	model *StageModel
}

// At backdates the stage's start.
func At(start time.Time) StageOption { return func(c *stageConfig) { c.start = start } }

// NewRoot makes the stage's span a trace root.
func NewRoot() StageOption { return func(c *stageConfig) { c.root = true } }

// WithAttributes adds span attributes (never metric labels).
func WithAttributes(kv ...attribute.KeyValue) StageOption {
	return func(c *stageConfig) { c.attrs = append(c.attrs, kv...) }
}

// WithModel sets the model the stage runs on.
func WithModel(m StageModel) StageOption { return func(c *stageConfig) { c.model = &m } }

// Stage is one running stage. End it exactly once; later Ends are ignored.
type Stage struct {
	s     *Stages
	name  string
	id    Identity
	start time.Time
	span  trace.Span
	model *StageModel
	ended bool
}

// Start starts stage name on ctx; the returned context carries its span, so
// stages started on it nest under it.
func (s *Stages) Start(ctx context.Context, name string, opts ...StageOption) (context.Context, *Stage) {
	if s == nil {
		return ctx, nil
	}
	var c stageConfig
	for _, o := range opts {
		o(&c)
	}
	if c.start.IsZero() {
		c.start = s.now()
	}
	id := StageIdentity(ctx)
	attrs := append([]attribute.KeyValue{
		attribute.String(AttrScope, id.Scope), attribute.String(AttrChatKind, id.ChatKind),
	}, c.attrs...)
	if c.model != nil {
		attrs = append(attrs, c.model.Attributes()...)
	}
	so := []trace.SpanStartOption{trace.WithTimestamp(c.start), trace.WithAttributes(attrs...)}
	if c.root {
		so = append(so, trace.WithNewRoot())
	}
	ctx, span := s.tracer.Start(ctx, name, so...)
	return ctx, &Stage{s: s, name: name, id: id, start: c.start, span: span, model: c.model}
}

// Record emits a reconstructed stage from timestamps captured elsewhere
// (acquisition, queue_wait, thinking), observed like a live one.
func (s *Stages) Record(ctx context.Context, name string, start, end time.Time, opts ...StageOption) {
	_, st := s.Start(ctx, name, append(opts, At(start))...)
	st.EndAt(end, nil)
}

// Span is the stage's span (a no-op span for a nil stage).
func (st *Stage) Span() trace.Span {
	if st == nil {
		return trace.SpanFromContext(context.Background())
	}
	return st.span
}

// StartTime is when the stage started.
func (st *Stage) StartTime() time.Time {
	if st == nil {
		return time.Time{}
	}
	return st.start
}

// SetModel stamps the model once it is resolved (prepare).
func (st *Stage) SetModel(m StageModel) {
	if st == nil {
		return
	}
	st.model = &m
	st.span.SetAttributes(m.Attributes()...)
}

// SetAttributes adds span attributes.
func (st *Stage) SetAttributes(kv ...attribute.KeyValue) {
	if st != nil {
		st.span.SetAttributes(kv...)
	}
}

// End ends the stage now: the span (errored when err is non-nil) and its
// observation.
func (st *Stage) End(err error) {
	if st != nil {
		st.EndAt(st.s.now(), err)
	}
}

// EndAt ends the stage at end.
func (st *Stage) EndAt(end time.Time, err error) { st.end(end, err, true) }

// EndUnobserved ends the span at end without observing the histograms: a
// time_to_first_token window no output part closed, a chat_turn that did
// not complete.
func (st *Stage) EndUnobserved(end time.Time, err error) { st.end(end, err, false) }

func (st *Stage) end(end time.Time, err error, observe bool) {
	if st == nil || st.ended {
		return
	}
	st.ended = true
	if end.Before(st.start) {
		end = st.start
	}
	if err != nil {
		st.span.RecordError(err, trace.WithTimestamp(end))
		st.span.SetStatus(codes.Error, err.Error())
	}
	st.span.End(trace.WithTimestamp(end))
	if !observe || !observed[st.name] {
		return
	}
	ctx := context.Background()
	d := end.Sub(st.start).Seconds()
	st.s.stage.Record(ctx, d, metric.WithAttributes(
		attribute.String(AttrStage, st.name), attribute.String(AttrScope, st.id.Scope), attribute.String(AttrChatKind, st.id.ChatKind)))
	if st.model == nil {
		return
	}
	if modelStages[st.name] && st.id.Scope == ScopeTurn {
		st.s.model.Record(ctx, d, metric.WithAttributes(
			attribute.String(AttrStage, st.name), attribute.String(AttrProviderType, st.model.ProviderType),
			attribute.String(AttrChatKind, st.id.ChatKind), attribute.String(AttrModel, st.model.Model)))
	}
	if st.name == StageTTFT {
		st.s.ttft.Record(ctx, d, metric.WithAttributes(
			attribute.String(AttrProviderType, st.model.ProviderType),
			attribute.String(AttrChatKind, st.id.ChatKind), attribute.String(AttrModel, st.model.Model)))
	}
}

// countProviderError counts one failed provider attempt on model m.
func (s *Stages) countProviderError(m StageModel, kind string) {
	s.provErrs.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String(AttrProviderType, m.ProviderType), attribute.String(AttrModel, m.Model), attribute.String("kind", kind)))
}

// CountTurnOutcome counts one closed turn.
func (s *Stages) CountTurnOutcome(outcome, chatKind string) {
	if s == nil {
		return
	}
	s.outcomes.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String(AttrOutcome, outcome), attribute.String(AttrChatKind, chatKind)))
}

// CountAnomaly counts one stage anomaly.
func (s *Stages) CountAnomaly(reason string) {
	if s == nil {
		return
	}
	s.anomalies.Add(context.Background(), 1, metric.WithAttributes(attribute.String(AttrReason, reason)))
}
