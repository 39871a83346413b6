package hooks_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

// A dispatch verified by the SDK's handler end to end, over TLS.
func TestDispatchVerifiedBySDK(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen agenthooks.PreToolUseData
		meta agenthooks.Meta
		c    *consumer
	)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agenthooks.NewHTTPHandler([]byte(testSecret), c.cfg.URL, agenthooks.Hooks{
			PreToolUse: func(_ context.Context, m agenthooks.Meta, d agenthooks.PreToolUseData) (agenthooks.Response, error) {
				mu.Lock()
				seen, meta = d, m
				mu.Unlock()
				return agenthooks.Response{
					Permission:   &agenthooks.Permission{Decision: agenthooks.PermissionAllow, InputOverride: json.RawMessage(`{"path":"/safe"}`)},
					ModelContext: "rewritten by policy",
				}, nil
			},
		}, agenthooks.WithExpectedIssuer(testDeployment), agenthooks.WithClock(c.clock.Now)).ServeHTTP(w, r)
	})
	c = newConsumer(t, handler)
	input := `{"path":"/allowed",   "PATH":"/secret"}`
	ev := toolEvent(t, input)
	ev.Chat.TurnID = ptr(ev.Chat.OwnerID)
	resp, err := c.d.Dispatch(context.Background(), ev)
	require.NoError(t, err)
	require.NotNil(t, resp.Permission)
	require.Equal(t, agenthooks.PermissionAllow, resp.Permission.Decision)
	require.JSONEq(t, `{"path":"/safe"}`, string(resp.Permission.InputOverride))
	require.Equal(t, "rewritten by policy", resp.ModelContext)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, input, string(seen.ToolInput), "the consumer gets the model's exact bytes")
	require.Equal(t, ev.Chat.ChatID, meta.ChatID)
	require.Equal(t, ev.Chat.TurnID, meta.TurnID)
	require.Equal(t, 1, meta.SchemaVersion)
	require.EqualValues(t, 1, c.meter.get("ok"))
}

func ptr[T any](v T) *T { return &v }

// The JWT carries exactly the claims of the protocol.
func TestJWTClaims(t *testing.T) {
	t.Parallel()
	var auth, body atomic.Value
	c := newConsumer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		auth.Store(r.Header.Get("Authorization"))
		body.Store(b)
	}))
	ev := promptEvent(t)
	_, err := c.d.Dispatch(context.Background(), ev)
	require.NoError(t, err)

	tok := strings.TrimPrefix(auth.Load().(string), "Bearer ")
	parts := strings.Split(tok, ".")
	require.Len(t, parts, 3)
	var header map[string]any
	decodeSegment(t, parts[0], &header)
	require.Equal(t, map[string]any{"alg": "HS256", "typ": "JWT"}, header)
	var claims map[string]any
	decodeSegment(t, parts[1], &claims)
	keys := make([]string, 0, len(claims))
	for k := range claims {
		keys = append(keys, k)
	}
	require.ElementsMatch(t, []string{"iss", "sub", "aud", "iat", "nbf", "exp", "jti", "type", "body_sha256"}, keys)
	b := body.Load().([]byte)
	meta := requestMeta(t, b)
	require.Equal(t, testDeployment, claims["iss"])
	require.Equal(t, "coder:chat:"+ev.Chat.ChatID.String(), claims["sub"])
	require.Equal(t, c.cfg.URL, claims["aud"], "aud is a string, the hook URL")
	require.Equal(t, meta.DispatchID.String(), claims["jti"])
	require.Equal(t, "user_prompt_submit", claims["type"])
	require.Equal(t, agenthooks.BodySHA256(b), claims["body_sha256"])
	now := float64(c.clock.Now().Unix())
	require.Equal(t, now, claims["iat"])
	require.Equal(t, now-30, claims["nbf"], "nbf is backdated 30 s, as the reference dispatcher signs it")
	require.Equal(t, float64(c.clock.Now().Add(c.cfg.Timeout+hooks.TokenGrace).Unix()), claims["exp"])
	require.JSONEq(t, `{"prompt":"hello","parts":[{"type":"text","text":"hello"}]}`, string(mustData(t, b)))
}

func decodeSegment(t *testing.T, seg string, v any) {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, v))
}

func mustData(t *testing.T, body []byte) json.RawMessage {
	var req agenthooks.Request
	require.NoError(t, json.Unmarshal(body, &req))
	return req.Data
}

// Every failure mode fails closed with a typed, counted error that carries
// the dispatch ID the consumer saw.
func TestFailureModesFailClosed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		event  func(t *testing.T) hooks.Event
		status int
		body   string
		result hooks.Result
	}{
		{"non-2xx", promptEvent, 500, `{}`, hooks.ResultStatus},
		{"unauthorized", promptEvent, 401, ``, hooks.ResultStatus},
		{"redirect not followed", promptEvent, 307, ``, hooks.ResultStatus},
		{"not JSON", promptEvent, 200, `allow`, hooks.ResultMalformed},
		{"duplicate key", promptEvent, 200, `{"user_message":"a","user_message":"b"}`, hooks.ResultMalformed},
		{"duplicate nested key", promptEvent, 200, `{"permission":{"decision":"deny","decision":"allow"}}`, hooks.ResultMalformed},
		{"unknown field", promptEvent, 200, `{"model_context":"x","extra":1}`, hooks.ResultMalformed},
		{"field in other case", promptEvent, 200, `{"Model_Context":"x"}`, hooks.ResultMalformed},
		{"trailing data", promptEvent, 200, `{} {}`, hooks.ResultMalformed},
		{"not an object", promptEvent, 200, `[]`, hooks.ResultMalformed},
		{"unknown decision", promptEvent, 200, `{"permission":{"decision":"ask"}}`, hooks.ResultMalformed},
		{"allow prompt without override", promptEvent, 200, `{"permission":{"decision":"allow"}}`, hooks.ResultMalformed},
		{"prompt override with extra key", promptEvent, 200, `{"permission":{"decision":"allow","input_override":{"prompt":"x","parts":[]}}}`, hooks.ResultMalformed},
		{"prompt override not a string", promptEvent, 200, `{"permission":{"decision":"allow","input_override":{"prompt":1}}}`, hooks.ResultMalformed},
		{"deny with override", promptEvent, 200, `{"permission":{"decision":"deny","input_override":{"prompt":"x"}}}`, hooks.ResultMalformed},
		{"allow tool without override", toolEv, 200, `{"permission":{"decision":"allow"}}`, hooks.ResultMalformed},
		{"ambiguous tool override", toolEv, 200, `{"permission":{"decision":"allow","input_override":{"path":"a","path":"b"}}}`, hooks.ResultMalformed},
		{"tool override not an object", toolEv, 200, `{"permission":{"decision":"allow","input_override":"rm -rf"}}`, hooks.ResultMalformed},
		{"permission on stop", stopEv, 200, `{"permission":{"decision":"deny"}}`, hooks.ResultMalformed},
		{"permission on post_tool_use", postToolEv, 200, `{"permission":{"decision":"allow","input_override":{}}}`, hooks.ResultMalformed},
		{"user_message not a string", stopEv, 200, `{"user_message":["x"]}`, hooks.ResultMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var seen atomic.Value
			c := newConsumer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				seen.Store(b)
				if tc.status == 307 {
					http.Redirect(w, r, "/elsewhere", tc.status)
					return
				}
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			resp, err := c.d.Dispatch(context.Background(), tc.event(t))
			de, ok := hooks.AsDispatchError(err)
			require.True(t, ok, "want a DispatchError, got %v", err)
			require.Equal(t, tc.result, de.Result, de.Error())
			require.Nil(t, resp.Permission)
			meta := requestMeta(t, seen.Load().([]byte))
			require.Equal(t, meta.DispatchID, de.DispatchID)
			require.Contains(t, de.Error(), meta.DispatchID.String())
			require.Equal(t, map[string]int64{string(tc.result): 1}, c.meter.snapshot())
		})
	}
}

func toolEv(t *testing.T) hooks.Event { return toolEvent(t, `{"path":"/a"}`) }
func stopEv(*testing.T) hooks.Event   { return hooks.Stop(chatRef()) }
func postToolEv(t *testing.T) hooks.Event {
	ev, err := hooks.PostToolUse(chatRef(), "call_1", "read_file", "", json.RawMessage(`{"ok":true}`), "")
	require.NoError(t, err)
	return ev
}

// Accepted response shapes.
func TestResponsesAccepted(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		event func(t *testing.T) hooks.Event
		body  string
		check func(t *testing.T, r agenthooks.Response)
	}{
		{"empty body", promptEvent, ``, func(t *testing.T, r agenthooks.Response) { require.Equal(t, agenthooks.Response{}, r) }},
		{"empty object", toolEv, ` {} `, func(t *testing.T, r agenthooks.Response) { require.Equal(t, agenthooks.Response{}, r) }},
		{"deny prompt", promptEvent, `{"permission":{"decision":"deny","reason":"r"},"user_message":"not allowed"}`, func(t *testing.T, r agenthooks.Response) {
			require.True(t, hooks.Denied(r))
			require.Equal(t, "not allowed", r.UserMessage)
		}},
		{"rewrite prompt", promptEvent, `{"permission":{"decision":"allow","input_override":{"prompt":"clean"}},"model_context":"m"}`, func(t *testing.T, r agenthooks.Response) {
			p, ok := hooks.PromptOverride(r)
			require.True(t, ok)
			require.Equal(t, "clean", p)
			require.Equal(t, "m", r.ModelContext)
		}},
		{"stop with context", stopEv, `{"model_context":"keep going","permission":null}`, func(t *testing.T, r agenthooks.Response) {
			require.Equal(t, "keep going", r.ModelContext)
			require.Nil(t, r.Permission)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newConsumer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, tc.body)
			}))
			resp, err := c.d.Dispatch(context.Background(), tc.event(t))
			require.NoError(t, err)
			tc.check(t, resp)
			require.EqualValues(t, 1, c.meter.get("ok"))
		})
	}
}

// A consumer that does not answer within CHATD_HOOK_TIMEOUT fails the
// dispatch as a timeout, without a retry.
func TestTimeout(t *testing.T) {
	t.Parallel()
	var attempts atomic.Int32
	arrived := make(chan struct{}, 4)
	c := newConsumer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // the server notices a closed connection only after the body
		attempts.Add(1)
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	errc := make(chan error, 1)
	go func() {
		_, err := c.d.Dispatch(context.Background(), toolEv(t))
		errc <- err
	}()
	<-arrived
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.clock.BlockUntilContext(ctx, 1)) // the dispatch timeout
	c.clock.Advance(c.cfg.Timeout)
	err := <-errc
	de, ok := hooks.AsDispatchError(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, hooks.ResultTimeout, de.Result)
	require.EqualValues(t, 1, attempts.Load())
	require.EqualValues(t, 1, c.meter.get("timeout"))
}

// A connection that breaks after the consumer read the request is retried
// once with the identical JWT and body (so the same dispatch_id).
func TestBrokenConnectionRetriedWithIdenticalJWT(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		auths []string
		ids   []string
	)
	c := newConsumer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		ids = append(ids, requestMeta(t, b).DispatchID.String())
		n := len(auths)
		mu.Unlock()
		if n == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		_, _ = io.WriteString(w, `{"permission":{"decision":"deny"}}`)
	}))
	resp, err := c.d.Dispatch(context.Background(), toolEv(t))
	require.NoError(t, err)
	require.True(t, hooks.Denied(resp))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, auths, 2)
	require.Equal(t, auths[0], auths[1], "the retry carries the identical JWT")
	require.Equal(t, ids[0], ids[1], "and the same dispatch_id")
	require.Equal(t, map[string]int64{"ok": 1}, c.meter.snapshot())
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	return servicetest.FreeAddr(t)
}

// A refused connection is retried once; the retry reaches the consumer.
func TestRefusedConnectionRetriedOnce(t *testing.T) {
	t.Parallel()
	var got atomic.Int32
	var dials atomic.Int32
	refused := closedAddr(t)
	c := newConsumerWithDial(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
	}), func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) == 1 {
			addr = refused
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	})
	_, err := c.d.Dispatch(context.Background(), toolEv(t))
	require.NoError(t, err)
	require.EqualValues(t, 2, dials.Load())
	require.EqualValues(t, 1, got.Load())
	require.Equal(t, map[string]int64{"ok": 1}, c.meter.snapshot())

	// Refused twice: the dispatch fails as a connection failure after
	// exactly one retry.
	dials.Store(0)
	c2 := newConsumerWithDial(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Add(1) }),
		func(ctx context.Context, network, _ string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, refused)
		})
	_, err = c2.d.Dispatch(context.Background(), toolEv(t))
	de, ok := hooks.AsDispatchError(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, hooks.ResultConnection, de.Result)
	require.EqualValues(t, 2, dials.Load())
	require.EqualValues(t, 1, got.Load())
	require.Equal(t, map[string]int64{"connection": 1}, c2.meter.snapshot())
}

func newConsumerWithDial(t *testing.T, h http.Handler, dial func(context.Context, string, string) (net.Conn, error)) *consumer {
	t.Helper()
	c := newConsumer(t, h)
	tr := c.srv.Client().Transport.(*http.Transport).Clone()
	tr.DialContext = dial
	d, err := hooks.New(c.cfg, hooks.WithHTTPClient(&http.Client{Transport: tr}), hooks.WithClock(c.clock), hooks.WithMeter(c.meter))
	require.NoError(t, err)
	c.d = d
	return c
}

// Under a burst, at most 256 dispatches run at once, prompt admissions hold
// at most 192 of them, the slots left stay reachable by admitted work, and
// dispatches that find no slot within 250 ms fail as over capacity.
func TestCapacityUnderBurst(t *testing.T) {
	t.Parallel()
	var (
		inFlight, prompts, maxInFlight, maxPrompts atomic.Int32
		arrivals                                   = make(chan agenthooks.EventType, 1024)
	)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	c := newConsumer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req agenthooks.Request
		_ = json.Unmarshal(b, &req)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		storeMax(&maxInFlight, n)
		if req.Type == agenthooks.EventUserPromptSubmit {
			storeMax(&maxPrompts, prompts.Add(1))
			defer prompts.Add(-1)
		}
		arrivals <- req.Type
		<-release
	}))
	t.Cleanup(releaseAll) // before the server closes (LIFO)
	tr := c.srv.Client().Transport.(*http.Transport)
	tr.MaxIdleConnsPerHost = hooks.MaxConcurrent

	const nPrompts, nTools = 300, 100
	results := make(chan error, nPrompts+nTools)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for range nPrompts {
		go func() {
			_, err := c.d.Dispatch(context.Background(), promptEvent(t))
			results <- err
		}()
	}
	// 192 prompts reach the consumer; the other 108 wait for an admission
	// slot. Each running dispatch has a timeout timer, each waiting one a
	// slot timer.
	waitArrivals(t, ctx, arrivals, hooks.MaxAdmission)
	require.NoError(t, c.clock.BlockUntilContext(ctx, nPrompts))
	for range nTools {
		go func() {
			_, err := c.d.Dispatch(context.Background(), toolEv(t))
			results <- err
		}()
	}
	// 64 tool calls still find a slot; 36 wait.
	waitArrivals(t, ctx, arrivals, hooks.MaxConcurrent-hooks.MaxAdmission)
	require.NoError(t, c.clock.BlockUntilContext(ctx, nPrompts+nTools))
	require.EqualValues(t, hooks.MaxConcurrent, inFlight.Load())
	require.EqualValues(t, hooks.MaxAdmission, prompts.Load())

	// 250 ms pass: every waiting dispatch fails as over capacity.
	c.clock.Advance(hooks.SlotWait)
	over := 0
	for range (nPrompts - hooks.MaxAdmission) + (nTools - (hooks.MaxConcurrent - hooks.MaxAdmission)) {
		select {
		case err := <-results:
			de, ok := hooks.AsDispatchError(err)
			require.True(t, ok, "%v", err)
			require.Equal(t, hooks.ResultOverCapacity, de.Result)
			over++
		case <-ctx.Done():
			t.Fatal("over-capacity dispatches did not fail")
		}
	}
	require.Equal(t, 144, over)
	require.EqualValues(t, 144, c.meter.get("over_capacity"))

	// Releasing the consumer completes the 256 that held slots.
	releaseAll()
	for range hooks.MaxConcurrent {
		select {
		case err := <-results:
			require.NoError(t, err)
		case <-ctx.Done():
			t.Fatal("running dispatches did not finish")
		}
	}
	require.EqualValues(t, hooks.MaxConcurrent, c.meter.get("ok"))
	require.LessOrEqual(t, maxInFlight.Load(), int32(hooks.MaxConcurrent))
	require.LessOrEqual(t, maxPrompts.Load(), int32(hooks.MaxAdmission))

	// With the slots free again, a dispatch goes straight through.
	_, err := c.d.Dispatch(context.Background(), toolEv(t))
	require.NoError(t, err)
}

func storeMax(m *atomic.Int32, n int32) {
	for {
		cur := m.Load()
		if n <= cur || m.CompareAndSwap(cur, n) {
			return
		}
	}
}

func waitArrivals(t *testing.T, ctx context.Context, ch chan agenthooks.EventType, n int) {
	t.Helper()
	for range n {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("fewer than %d dispatches reached the consumer", n)
		}
	}
}

// Without the experiment, with the break-glass switch off, without a URL,
// or through a nil dispatcher, nothing is dispatched.
func TestInactiveDispatchesNothing(t *testing.T) {
	t.Parallel()
	var got atomic.Int32
	c := newConsumer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Add(1) }))
	for name, mutate := range map[string]func(*hooks.Config){
		"no experiment": func(c *hooks.Config) { c.Experiments = []string{"something-else"} },
		"break-glass":   func(c *hooks.Config) { c.Enabled = false },
		"no URL":        func(c *hooks.Config) { c.URL = "" },
	} {
		cfg := c.cfg
		mutate(&cfg)
		d, err := hooks.New(cfg, hooks.WithHTTPClient(c.srv.Client()))
		require.NoError(t, err, name)
		require.False(t, d.Active(), name)
		resp, err := d.Dispatch(context.Background(), promptEvent(t))
		require.NoError(t, err, name)
		require.Equal(t, agenthooks.Response{}, resp)
	}
	var nilD *hooks.Dispatcher
	_, err := nilD.Dispatch(context.Background(), promptEvent(t))
	require.NoError(t, err)
	require.EqualValues(t, 0, got.Load())

	// The active one does dispatch (the consumer above is reachable).
	_, err = c.d.Dispatch(context.Background(), promptEvent(t))
	require.NoError(t, err)
	require.EqualValues(t, 1, got.Load())
}

// A canceled caller is not a consumer failure: typed canceled, not counted.
func TestCallerCanceled(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	c := newConsumer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.d.Dispatch(ctx, toolEv(t))
		errc <- err
	}()
	<-arrived
	cancel()
	err := <-errc
	de, ok := hooks.AsDispatchError(err)
	require.True(t, ok)
	require.Equal(t, hooks.ResultCanceled, de.Result)
	require.True(t, errors.Is(err, context.Canceled))
	require.Empty(t, c.meter.snapshot())
}
