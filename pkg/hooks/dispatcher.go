package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/telemetry"
)

// Capacity limits of one process.
const (
	// MaxConcurrent is how many dispatches run at once.
	MaxConcurrent = 256
	// MaxAdmission is how many of them prompt admission may hold, so at
	// least MaxConcurrent-MaxAdmission stay reachable only by work a chat
	// already admitted.
	MaxAdmission = 192
	// SlotWait is how long a dispatch waits for a free slot before it fails
	// as over capacity.
	SlotWait = 250 * time.Millisecond
	// MaxResponseBytes bounds a consumer's response body; a larger one is
	// malformed.
	MaxResponseBytes = 1 << 20
	// TokenGrace is added to CHATD_HOOK_TIMEOUT for the JWT's lifetime
	// (exp - iat), to tolerate a consumer clock that runs ahead.
	TokenGrace = 30 * time.Second
	// MetricName is the counter of finished dispatches, by result.
	MetricName = "chatd_hook_dispatches_total"
)

// UserAgent is the User-Agent of every dispatch: chatd-hooks/<version>,
// the binary's build version (telemetry.BuildVersion).
var UserAgent = "chatd-hooks/" + strings.Trim(telemetry.BuildVersion(), "()")

// Result classifies a finished dispatch (the result attribute of
// chatd_hook_dispatches_total).
type Result string

// The results. Every one but ResultOK fails the dispatch closed.
const (
	ResultOK           Result = "ok"
	ResultOverCapacity Result = "over_capacity"
	ResultTimeout      Result = "timeout"
	ResultConnection   Result = "connection"
	ResultStatus       Result = "status"
	ResultMalformed    Result = "malformed"
	// ResultCanceled is the caller's context ending first (the chat was
	// interrupted, the process stops). It is not a consumer failure and
	// is not counted.
	ResultCanceled Result = "canceled"
)

// DispatchError is a failed dispatch. The caller fails closed and records
// DispatchID in the chat's error details, so it can be matched with the
// consumer's logs.
//
// Its text is shown to chat users (the chat's error), so it never carries
// the consumer's URL or address: Detail is chatd's own description of the
// failure, and Err, the underlying error (a transport error names the
// URL), is only logged by the dispatcher and reachable through Unwrap.
type DispatchError struct {
	DispatchID uuid.UUID
	Type       agenthooks.EventType
	Result     Result
	// StatusCode is the consumer's status for ResultStatus.
	StatusCode int
	// Detail says what failed without naming the consumer.
	Detail string
	Err    error
}

func (e *DispatchError) Error() string {
	return fmt.Sprintf("lifecycle hook %s dispatch %s failed (%s): %s", e.Type, e.DispatchID, e.Result, e.Detail)
}

func (e *DispatchError) Unwrap() error { return e.Err }

// AsDispatchError returns the *DispatchError in err's chain.
func AsDispatchError(err error) (*DispatchError, bool) {
	var de *DispatchError
	ok := errors.As(err, &de)
	return de, ok
}

// Event is one lifecycle event to dispatch. Build it with the helpers
// (SessionStart, UserPromptSubmit, ...), which encode Data.
type Event struct {
	Type agenthooks.EventType
	Chat agenthooks.ChatRef
	// Data is the event's data object, spliced into the body as is.
	Data json.RawMessage
	// Admission marks a dispatch that admits new work into a chat (a
	// prompt being created, sent, queued or edited, or the session_start
	// of such an admission); it may hold only MaxAdmission slots. Work a
	// chat already admitted (tool calls, turns, compaction, a subagent
	// spawn from a running turn) leaves it false.
	Admission bool
	// ToolSchema, on pre_tool_use, is the tool's JSON input schema: an
	// input_override must be of a JSON type its top-level "type" allows (an
	// object when it names none), and for a built-in tool one that
	// misspells a property's capitalization fails the dispatch closed.
	ToolSchema json.RawMessage
	// ClientTool, on pre_tool_use, marks a client-executed (dynamic) tool:
	// without a declared schema type its override may be any JSON, and the
	// capitalization check does not apply (the client validates its input).
	ClientTool bool
}

// Option configures a Dispatcher.
type Option func(*Dispatcher)

// WithHTTPClient sets the client the dispatcher posts with (tests use it
// to trust a test certificate). Redirects are never followed.
func WithHTTPClient(c *http.Client) Option {
	return func(d *Dispatcher) { d.client = c }
}

// WithClock sets the clock for JWT times, the slot wait and the timeout.
func WithClock(c clockwork.Clock) Option {
	return func(d *Dispatcher) { d.clock = c }
}

// WithMeter sets the meter the dispatch counter is created on (default:
// the global meter provider, a no-op until one is installed).
func WithMeter(m metric.Meter) Option {
	return func(d *Dispatcher) { d.meter = m }
}

// WithLogger sets the logger for the startup warning and failed dispatches.
func WithLogger(l *slog.Logger) Option {
	return func(d *Dispatcher) { d.logger = l }
}

// Dispatcher sends lifecycle events to the consumer. It is safe for
// concurrent use. A nil *Dispatcher, or one whose Config is not Active,
// dispatches nothing and returns empty responses.
type Dispatcher struct {
	cfg       Config
	active    bool
	secret    []byte
	client    *http.Client
	clock     clockwork.Clock
	meter     metric.Meter
	logger    *slog.Logger
	counter   metric.Int64Counter
	slots     chan struct{}
	admission chan struct{}
}

// New returns a Dispatcher for cfg. It validates cfg (see Config.Validate)
// and logs Config.StartupWarning.
func New(cfg Config, opts ...Option) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("lifecycle hooks: %w", err)
	}
	d := &Dispatcher{
		cfg:       cfg,
		active:    cfg.Active(),
		secret:    []byte(cfg.Secret),
		clock:     clockwork.NewRealClock(),
		logger:    slog.New(slog.DiscardHandler),
		slots:     make(chan struct{}, MaxConcurrent),
		admission: make(chan struct{}, MaxAdmission),
	}
	for _, o := range opts {
		o(d)
	}
	if d.meter == nil {
		d.meter = otel.GetMeterProvider().Meter("github.com/chatd/chatd/pkg/hooks")
	}
	counter, err := d.meter.Int64Counter(MetricName,
		metric.WithDescription("Lifecycle hook dispatches by result: ok, over_capacity, timeout, connection, status or malformed."))
	if err != nil {
		return nil, fmt.Errorf("lifecycle hooks: counter: %w", err)
	}
	d.counter = counter
	if d.client == nil {
		d.client = cfg.HTTPClient
	}
	if d.client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = MaxConcurrent
		d.client = &http.Client{Transport: t}
	}
	c := *d.client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	d.client = &c
	cfg.LogStartup(d.logger)
	return d, nil
}

// Active reports whether Dispatch sends events.
func (d *Dispatcher) Active() bool { return d != nil && d.active }

// Dispatch sends ev and returns the consumer's validated response. It
// returns an empty response and no error when the dispatcher is not active.
// Any failure is a *DispatchError: fail closed.
func (d *Dispatcher) Dispatch(ctx context.Context, ev Event) (agenthooks.Response, error) {
	if !d.Active() {
		return agenthooks.Response{}, nil
	}
	id := uuid.New()
	// fail fails the dispatch: detail is shown to users, err only logged.
	fail := func(r Result, status int, detail string, err error) (agenthooks.Response, error) {
		if r != ResultCanceled {
			d.counter.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("result", string(r))))
		}
		de := &DispatchError{DispatchID: id, Type: ev.Type, Result: r, StatusCode: status, Detail: detail, Err: err}
		d.logger.Warn("lifecycle hook dispatch failed", "dispatch_id", id, "type", ev.Type,
			"chat_id", ev.Chat.ChatID, "result", r, "error", err)
		return agenthooks.Response{}, de
	}
	if !ev.Type.Valid() {
		return agenthooks.Response{}, fmt.Errorf("lifecycle hooks: unknown event type %q", ev.Type)
	}
	body, err := d.body(id, ev)
	if err != nil {
		return agenthooks.Response{}, err
	}
	now := d.clock.Now()
	token, err := agenthooks.Sign(d.secret, agenthooks.Claims{
		Issuer:     d.cfg.DeploymentID,
		Subject:    agenthooks.Subject(ev.Chat.ChatID),
		Audience:   d.cfg.URL,
		IssuedAt:   now.Unix(),
		NotBefore:  now.Add(-agenthooks.NotBeforeBackdate).Unix(),
		Expires:    now.Add(d.cfg.Timeout + TokenGrace).Unix(),
		JTI:        id.String(),
		Type:       ev.Type,
		BodySHA256: agenthooks.BodySHA256(body),
	})
	if err != nil {
		return agenthooks.Response{}, fmt.Errorf("lifecycle hooks: sign: %w", err)
	}

	release, r, err := d.acquire(ctx, ev.Admission)
	if err != nil {
		return fail(r, 0, err.Error(), err)
	}
	defer release()

	tctx, cancel := clockwork.WithTimeout(ctx, d.clock, d.cfg.Timeout)
	defer cancel()
	var (
		status  int
		payload []byte
	)
	for attempt := 1; ; attempt++ {
		status, payload, err = d.post(tctx, token, body)
		if err == nil {
			break
		}
		switch {
		case done(ctx):
			return fail(ResultCanceled, 0, ctx.Err().Error(), ctx.Err())
		case done(tctx):
			return fail(ResultTimeout, 0, fmt.Sprintf("the consumer did not answer within %s", d.cfg.Timeout),
				fmt.Errorf("no response within %s: %w", d.cfg.Timeout, err))
		case attempt == 2:
			return fail(ResultConnection, 0, "the consumer could not be reached (retried once)",
				fmt.Errorf("retried once: %w", err))
		}
		// One retry of a connection failure, with the same JWT and body.
	}
	if status < 200 || status > 299 {
		detail := fmt.Sprintf("the consumer answered %d %s", status, http.StatusText(status))
		return fail(ResultStatus, status, detail, errors.New(detail))
	}
	if len(payload) > MaxResponseBytes {
		detail := fmt.Sprintf("the response is larger than %d bytes", MaxResponseBytes)
		return fail(ResultMalformed, status, detail, errors.New(detail))
	}
	resp, err := ParseResponse(ev, payload)
	if err != nil {
		return fail(ResultMalformed, status, err.Error(), err)
	}
	d.counter.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("result", string(ResultOK))))
	return resp, nil
}

// done reports whether ctx has ended without blocking (a fake clock
// context's Err blocks until it ends).
func done(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// acquire takes a slot (and an admission slot for admissions), waiting at
// most SlotWait in all.
func (d *Dispatcher) acquire(ctx context.Context, admission bool) (func(), Result, error) {
	// Fast path: a free slot needs no timer.
	if tryAcquire(d.slots, admission, d.admission) {
		return d.releaser(admission), ResultOK, nil
	}
	timer := d.clock.NewTimer(SlotWait)
	defer timer.Stop()
	over := func(what string) (func(), Result, error) {
		return nil, ResultOverCapacity, fmt.Errorf("no free %s within %s", what, SlotWait)
	}
	if admission {
		select {
		case d.admission <- struct{}{}:
		case <-timer.Chan():
			return over(fmt.Sprintf("prompt admission slot (%d held)", MaxAdmission))
		case <-ctx.Done():
			return nil, ResultCanceled, ctx.Err()
		}
	}
	select {
	case d.slots <- struct{}{}:
		return d.releaser(admission), ResultOK, nil
	case <-timer.Chan():
		if admission {
			<-d.admission
		}
		return over(fmt.Sprintf("dispatch slot (%d held)", MaxConcurrent))
	case <-ctx.Done():
		if admission {
			<-d.admission
		}
		return nil, ResultCanceled, ctx.Err()
	}
}

func tryAcquire(slots chan struct{}, admission bool, adm chan struct{}) bool {
	if admission {
		select {
		case adm <- struct{}{}:
		default:
			return false
		}
	}
	select {
	case slots <- struct{}{}:
		return true
	default:
		if admission {
			<-adm
		}
		return false
	}
}

func (d *Dispatcher) releaser(admission bool) func() {
	return func() {
		<-d.slots
		if admission {
			<-d.admission
		}
	}
}

// post makes one attempt. An error is a transport failure: no complete
// response was read.
func (d *Dispatcher) post(ctx context.Context, token string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	payload, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, payload, nil
}

// body builds the request body by hand so raw data (tool input, parts,
// tool responses) keeps its exact bytes.
func (d *Dispatcher) body(id uuid.UUID, ev Event) ([]byte, error) {
	data := ev.Data
	if len(bytes.TrimSpace(data)) == 0 {
		data = json.RawMessage(`{}`)
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("lifecycle hooks: %s data is not valid JSON", ev.Type)
	}
	meta, err := marshal(agenthooks.Meta{DispatchID: id, SchemaVersion: agenthooks.SchemaVersion, ChatRef: ev.Chat})
	if err != nil {
		return nil, err
	}
	typ, err := marshal(ev.Type)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`{"type":`)
	b.Write(typ)
	b.WriteString(`,"meta":`)
	b.Write(meta)
	b.WriteString(`,"data":`)
	b.Write(data)
	b.WriteString(`}`)
	return b.Bytes(), nil
}

// marshal is json.Marshal without HTML escaping and without the newline.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
