package hooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/hooks"
)

// A consumer whose clock is 25 s behind chatd's accepts the token even with
// no leeway (the reference verifier allows none): nbf is backdated 30 s.
// At 35 s behind, the token is not valid yet — for a verifier without
// leeway — so the backdating, not the leeway, is what makes 25 s pass.
func TestConsumerClockBehind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		behind time.Duration
		leeway time.Duration
		ok     bool
	}{
		{25 * time.Second, 0, true},
		{25 * time.Second, agenthooks.DefaultLeeway, true},
		{35 * time.Second, 0, false},
		{34 * time.Second, agenthooks.DefaultLeeway, true},
	} {
		t.Run(fmt.Sprintf("%s behind, leeway %s", tc.behind, tc.leeway), func(t *testing.T) {
			t.Parallel()
			var c *consumer
			c = newConsumer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				agenthooks.NewHTTPHandler([]byte(testSecret), c.cfg.URL, agenthooks.Hooks{},
					agenthooks.WithExpectedIssuer(testDeployment),
					agenthooks.WithLeeway(tc.leeway),
					agenthooks.WithClock(func() time.Time { return c.clock.Now().Add(-tc.behind) }),
				).ServeHTTP(w, r)
			}))
			_, err := c.d.Dispatch(context.Background(), promptEvent(t))
			if tc.ok {
				require.NoError(t, err)
				return
			}
			de, ok := hooks.AsDispatchError(err)
			require.True(t, ok, "%v", err)
			require.Equal(t, http.StatusUnauthorized, de.StatusCode)
		})
	}
}

// Every dispatch identifies itself as chatd-hooks/<version>.
func TestUserAgent(t *testing.T) {
	t.Parallel()
	var ua atomic.Value
	c := newConsumer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ua.Store(r.Header.Get("User-Agent"))
	}))
	_, err := c.d.Dispatch(context.Background(), promptEvent(t))
	require.NoError(t, err)
	got := ua.Load().(string)
	require.Equal(t, hooks.UserAgent, got)
	require.Regexp(t, `^chatd-hooks/[^\s()/]+$`, got)
}

// A failure's text, which becomes a chat's error, never names the
// consumer's URL or address.
func TestDispatchErrorHidesConsumer(t *testing.T) {
	t.Parallel()
	const host = "policy.internal.example:8443"
	c := newConsumer(t, http.NotFoundHandler())
	cfg := c.cfg
	cfg.URL = "https://" + host + "/secret-path"
	refuse := &http.Transport{DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: network, Addr: fakeAddr(addr), Err: errors.New("connection refused")}
	}}
	d, err := hooks.New(cfg, hooks.WithHTTPClient(&http.Client{Transport: refuse}), hooks.WithClock(c.clock), hooks.WithMeter(c.meter))
	require.NoError(t, err)
	_, err = d.Dispatch(context.Background(), promptEvent(t))
	de, ok := hooks.AsDispatchError(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, hooks.ResultConnection, de.Result)
	require.NotContains(t, err.Error(), "policy.internal")
	require.NotContains(t, err.Error(), "secret-path")
	require.Contains(t, err.Error(), de.DispatchID.String())
	require.Contains(t, de.Err.Error(), host, "the underlying error (logged) keeps the detail")

	_, err = c.d.Dispatch(context.Background(), promptEvent(t)) // 404
	require.Error(t, err)
	require.NotContains(t, err.Error(), strings.TrimPrefix(c.srv.URL, "https://"))
	require.Contains(t, err.Error(), "404")
}

type fakeAddr string

func (a fakeAddr) Network() string { return "tcp" }
func (a fakeAddr) String() string  { return string(a) }

// The reference limits, at the boundary and one past it: model_context and
// user_message of 16 KiB pass on every event and one byte more fails closed
// naming the limit; input_override nests at most 128 levels.
func TestResponseLimits(t *testing.T) {
	t.Parallel()
	events := map[string]func(t *testing.T) hooks.Event{
		"session_start":      func(*testing.T) hooks.Event { return hooks.SessionStart(chatRef(), agenthooks.SourceStartup, true) },
		"user_prompt_submit": promptEvent,
		"pre_tool_use":       toolEv,
		"post_tool_use":      postToolEv,
		"pre_compact":        func(*testing.T) hooks.Event { return hooks.PreCompact(chatRef()) },
		"post_compact":       func(*testing.T) hooks.Event { return hooks.PostCompact(chatRef()) },
		"stop":               stopEv,
	}
	require.Len(t, events, len(agenthooks.EventTypes))
	text := func(n int) string {
		b, _ := json.Marshal(strings.Repeat("é", n/2) + strings.Repeat("x", n%2)) // bytes, not runes
		return string(b)
	}
	nested := func(levels int) string {
		return `{"permission":{"decision":"allow","input_override":` +
			strings.Repeat(`{"a":`, levels-1) + `{}` + strings.Repeat(`}`, levels-1) + `}}`
	}
	type tc struct {
		name, event, body, fail string
	}
	var cases []tc
	for name := range events {
		for _, field := range []string{"model_context", "user_message"} {
			cases = append(cases,
				tc{name + " " + field + " 16 KiB", name, `{"` + field + `":` + text(hooks.MaxTextBytes) + `}`, ""},
				tc{name + " " + field + " 16 KiB + 1", name, `{"` + field + `":` + text(hooks.MaxTextBytes+1) + `}`,
					field + " is 16385 bytes, over the 16384-byte (16 KiB) limit"})
		}
	}
	cases = append(cases,
		tc{"override 128 levels", "pre_tool_use", nested(128), ""},
		tc{"override 129 levels", "pre_tool_use", nested(129), "input_override nests more than 128 levels, the limit"},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newConsumer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, tc.body)
			}))
			_, err := c.d.Dispatch(context.Background(), events[tc.event](t))
			if tc.fail == "" {
				require.NoError(t, err)
				return
			}
			de, ok := hooks.AsDispatchError(err)
			require.True(t, ok, "%v", err)
			require.Equal(t, hooks.ResultMalformed, de.Result)
			require.Contains(t, err.Error(), tc.fail)
		})
	}
}

// A non-object input_override is accepted where the tool's schema takes it:
// a client tool without a declared type takes any JSON; a declared type is
// enforced; a built-in tool without one takes only an object.
func TestToolOverrideTypes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		schema   string
		client   bool
		override string
		ok       bool
	}{
		{"client tool, no schema, string", ``, true, `"ls -la"`, true},
		{"client tool, no schema, array", ``, true, `[1,2]`, true},
		{"client tool, no schema, number", ``, true, `42`, true},
		{"client tool, string schema, string", `{"type":"string"}`, true, `"x"`, true},
		{"client tool, string schema, object", `{"type":"string"}`, true, `{"a":1}`, false},
		{"client tool, integer schema, integer", `{"type":"integer"}`, true, `7`, true},
		{"client tool, integer schema, fraction", `{"type":"integer"}`, true, `7.5`, false},
		{"client tool, type list", `{"type":["array","null"]}`, true, `[]`, true},
		{"client tool, object schema, misspelled case allowed", `{"type":"object","properties":{"path":{}}}`, true, `{"PATH":"/a"}`, true},
		{"built-in tool, no type, string", `{"properties":{"path":{}}}`, false, `"rm -rf"`, false},
		{"built-in tool, no schema, array", ``, false, `[]`, false},
		{"built-in tool, object", `{"type":"object","properties":{"path":{}}}`, false, `{"path":"/a"}`, true},
		{"built-in tool, misspelled case", `{"type":"object","properties":{"path":{}}}`, false, `{"Path":"/a"}`, false},
		{"built-in tool, string schema", `{"type":"string"}`, false, `"x"`, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newConsumer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, `{"permission":{"decision":"allow","input_override":`+tc.override+`}}`)
			}))
			ev, err := hooks.PreToolUse(chatRef(), "call_1", "tool", "", json.RawMessage(`{}`), json.RawMessage(tc.schema))
			require.NoError(t, err)
			ev.ClientTool = tc.client
			resp, err := c.d.Dispatch(context.Background(), ev)
			if !tc.ok {
				de, ok := hooks.AsDispatchError(err)
				require.True(t, ok, "%v", err)
				require.Equal(t, hooks.ResultMalformed, de.Result)
				return
			}
			require.NoError(t, err)
			require.JSONEq(t, tc.override, string(resp.Permission.InputOverride))
		})
	}
}
