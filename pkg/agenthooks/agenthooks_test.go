package agenthooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/pkg/agenthooks"
)

var (
	secretA  = []byte("0123456789abcdef0123456789abcdef-a")
	secretB  = []byte("0123456789abcdef0123456789abcdef-b")
	secretC  = []byte("0123456789abcdef0123456789abcdef-c")
	audience = "https://hooks.example.com/chatd"
	issuer   = "deployment-1"
	now      = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
)

// dispatch is one request the way chatd builds it; tests mutate the parts.
type dispatch struct {
	body   []byte
	claims agenthooks.Claims
	secret []byte
	method jwt.SigningMethod
}

func newDispatch(t *testing.T, typ agenthooks.EventType, data string) *dispatch {
	t.Helper()
	meta, err := json.Marshal(agenthooks.Meta{
		DispatchID:    uuid.New(),
		SchemaVersion: agenthooks.SchemaVersion,
		ChatRef:       agenthooks.ChatRef{ChatID: uuid.New(), OwnerID: uuid.New()},
	})
	require.NoError(t, err)
	// Spliced by hand: json.Marshal would compact the raw data.
	body := []byte(`{"type":"` + string(typ) + `","meta":` + string(meta) + `,"data":` + data + `}`)
	claims, err := agenthooks.NewClaims(body, issuer, audience, now, time.Minute)
	require.NoError(t, err)
	return &dispatch{body: body, claims: claims, secret: secretA, method: jwt.SigningMethodHS256}
}

func (d *dispatch) token(t *testing.T) string {
	t.Helper()
	s, err := jwt.NewWithClaims(d.method, d.claims).SignedString(d.secret)
	require.NoError(t, err)
	return s
}

type server struct {
	url    string
	called atomic.Int32
}

func newServer(t *testing.T, secret []byte, aud string, hooks agenthooks.Hooks, opts ...agenthooks.HandlerOption) *server {
	t.Helper()
	s := &server{}
	wrap := func(h agenthooks.Hooks) agenthooks.Hooks {
		inner := h.PreToolUse
		h.PreToolUse = func(ctx context.Context, m agenthooks.Meta, d agenthooks.PreToolUseData) (agenthooks.Response, error) {
			s.called.Add(1)
			if inner == nil {
				return agenthooks.Response{}, nil
			}
			return inner(ctx, m, d)
		}
		return h
	}
	opts = append([]agenthooks.HandlerOption{agenthooks.WithClock(func() time.Time { return now })}, opts...)
	srv := httptest.NewServer(agenthooks.NewHTTPHandler(secret, aud, wrap(hooks), opts...))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func post(t *testing.T, url string, token string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

const toolInput = `{"path":"/allowed",  "PATH":"/x"}`

func toolData() string {
	return `{"tool_use_id":"call_1","tool_name":"read_file","tool_input":` + toolInput + `}`
}

func TestValidDispatchPasses(t *testing.T) {
	t.Parallel()
	var got agenthooks.PreToolUseData
	srv := newServer(t, secretA, audience, agenthooks.Hooks{
		PreToolUse: func(_ context.Context, m agenthooks.Meta, d agenthooks.PreToolUseData) (agenthooks.Response, error) {
			got = d
			return agenthooks.Deny("no"), nil
		},
	}, agenthooks.WithExpectedIssuer(issuer))
	d := newDispatch(t, agenthooks.EventPreToolUse, toolData())
	status, body := post(t, srv.url, d.token(t), d.body)
	require.Equal(t, http.StatusOK, status, string(body))
	require.JSONEq(t, `{"permission":{"decision":"deny","reason":"no"}}`, string(body))
	require.Equal(t, "call_1", got.ToolUseID)
	require.Equal(t, toolInput, string(got.ToolInput), "tool_input keeps the exact bytes")
	require.EqualValues(t, 1, srv.called.Load())
}

func TestEachCheckViolatedAloneIsRejected(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		check  string
		status int
		mutate func(t *testing.T, d *dispatch) string // returns the token
	}{
		{"wrong secret", agenthooks.CheckSignature, 401, func(t *testing.T, d *dispatch) string {
			d.secret = secretC
			return d.token(t)
		}},
		{"HS384 instead of HS256", agenthooks.CheckSignature, 401, func(t *testing.T, d *dispatch) string {
			d.method = jwt.SigningMethodHS384
			return d.token(t)
		}},
		{"alg none", agenthooks.CheckSignature, 401, func(t *testing.T, d *dispatch) string {
			s, err := jwt.NewWithClaims(jwt.SigningMethodNone, d.claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
			require.NoError(t, err)
			return s
		}},
		{"issuer of another deployment", agenthooks.CheckIssuer, 401, func(t *testing.T, d *dispatch) string {
			d.claims.Issuer = "deployment-2"
			return d.token(t)
		}},
		{"audience of another URL", agenthooks.CheckAudience, 401, func(t *testing.T, d *dispatch) string {
			d.claims.Audience = audience + "/other"
			return d.token(t)
		}},
		{"expired", agenthooks.CheckTime, 401, func(t *testing.T, d *dispatch) string {
			d.claims.Expires = now.Add(-agenthooks.DefaultLeeway - time.Second).Unix()
			return d.token(t)
		}},
		{"not yet valid", agenthooks.CheckTime, 401, func(t *testing.T, d *dispatch) string {
			d.claims.NotBefore = now.Add(time.Minute).Unix()
			return d.token(t)
		}},
		{"jti is not the dispatch ID", agenthooks.CheckDispatchID, 400, func(t *testing.T, d *dispatch) string {
			d.claims.JTI = uuid.NewString()
			return d.token(t)
		}},
		{"token type is not the body type", agenthooks.CheckType, 400, func(t *testing.T, d *dispatch) string {
			d.claims.Type = agenthooks.EventPostToolUse
			return d.token(t)
		}},
		{"body changed after signing", agenthooks.CheckBody, 400, func(t *testing.T, d *dispatch) string {
			tok := d.token(t)
			d.body = bytes.Replace(d.body, []byte("/allowed"), []byte("/secret!"), 1)
			return tok
		}},
		{"subject names another chat", agenthooks.CheckSubject, 400, func(t *testing.T, d *dispatch) string {
			d.claims.Subject = agenthooks.Subject(uuid.New())
			return d.token(t)
		}},
		{"subject of another form", agenthooks.CheckSubject, 400, func(t *testing.T, d *dispatch) string {
			id, err := d.claims.ChatID()
			require.NoError(t, err)
			d.claims.Subject = "chat:" + id.String()
			return d.token(t)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var rejected error
			srv := newServer(t, secretA, audience, agenthooks.Hooks{}, agenthooks.WithExpectedIssuer(issuer),
				agenthooks.WithRejectHook(func(_ *http.Request, err error) { rejected = err }))
			d := newDispatch(t, agenthooks.EventPreToolUse, toolData())
			tok := c.mutate(t, d)
			status, body := post(t, srv.url, tok, d.body)
			require.Equal(t, c.status, status, string(body))
			require.EqualValues(t, 0, srv.called.Load(), "the callback must not run")
			var ve *agenthooks.VerifyError
			require.True(t, errors.As(rejected, &ve), "%v", rejected)
			require.Equal(t, c.check, ve.Check, ve.Error())

			// The same check through Verifier directly.
			v := agenthooks.NewVerifier(secretA, audience, agenthooks.WithExpectedIssuer(issuer),
				agenthooks.WithClock(func() time.Time { return now }))
			_, _, err := v.Verify("Bearer "+tok, d.body)
			require.ErrorAs(t, err, &ve)
			require.Equal(t, c.check, ve.Check)
		})
	}
}

func TestWithoutExpectedIssuerAnyNonEmptyIssuer(t *testing.T) {
	t.Parallel()
	srv := newServer(t, secretA, audience, agenthooks.Hooks{})
	d := newDispatch(t, agenthooks.EventPreToolUse, toolData())
	d.claims.Issuer = "someone-else"
	status, _ := post(t, srv.url, d.token(t), d.body)
	require.Equal(t, http.StatusOK, status)
	d.claims.Issuer = ""
	status, _ = post(t, srv.url, d.token(t), d.body)
	require.Equal(t, http.StatusUnauthorized, status)
	require.EqualValues(t, 1, srv.called.Load())
}

func TestHandlerWithoutAudienceRejectsEverything(t *testing.T) {
	t.Parallel()
	srv := newServer(t, secretA, "", agenthooks.Hooks{})
	d := newDispatch(t, agenthooks.EventPreToolUse, toolData())
	d.claims.Audience = ""
	status, _ := post(t, srv.url, d.token(t), d.body)
	require.Equal(t, http.StatusUnauthorized, status)
	require.EqualValues(t, 0, srv.called.Load())
}

func TestSeveralSecretsForRotation(t *testing.T) {
	t.Parallel()
	srv := newServer(t, secretA, audience, agenthooks.Hooks{}, agenthooks.WithAdditionalSecrets(secretB))
	for _, c := range []struct {
		secret []byte
		status int
	}{{secretA, 200}, {secretB, 200}, {secretC, 401}} {
		d := newDispatch(t, agenthooks.EventPreToolUse, toolData())
		d.secret = c.secret
		status, body := post(t, srv.url, d.token(t), d.body)
		require.Equal(t, c.status, status, string(body))
	}
	require.EqualValues(t, 2, srv.called.Load())
}

func TestShortSecretRejectsEverything(t *testing.T) {
	t.Parallel()
	short := []byte("short-secret")
	srv := newServer(t, short, audience, agenthooks.Hooks{})
	d := newDispatch(t, agenthooks.EventPreToolUse, toolData())
	d.secret = short
	status, _ := post(t, srv.url, d.token(t), d.body)
	require.Equal(t, http.StatusUnauthorized, status)
	_, err := agenthooks.Sign(short, d.claims)
	require.Error(t, err)
}

func TestRoutingAndDefaults(t *testing.T) {
	t.Parallel()
	var source string
	srv := newServer(t, secretA, audience, agenthooks.Hooks{
		SessionStart: func(_ context.Context, _ agenthooks.Meta, d agenthooks.SessionStartData) (agenthooks.Response, error) {
			source = d.Source
			return agenthooks.Response{ModelContext: "ctx"}, nil
		},
		UserPromptSubmit: func(context.Context, agenthooks.Meta, agenthooks.UserPromptSubmitData) (agenthooks.Response, error) {
			return agenthooks.Response{}, errors.New("policy store down")
		},
	})
	d := newDispatch(t, agenthooks.EventSessionStart, `{"source":"resume"}`)
	status, body := post(t, srv.url, d.token(t), d.body)
	require.Equal(t, 200, status)
	require.JSONEq(t, `{"model_context":"ctx"}`, string(body))
	require.Equal(t, "resume", source)

	d = newDispatch(t, agenthooks.EventStop, `{}`) // no callback: no-op
	status, body = post(t, srv.url, d.token(t), d.body)
	require.Equal(t, 200, status)
	require.JSONEq(t, `{}`, string(body))

	d = newDispatch(t, agenthooks.EventUserPromptSubmit, `{"prompt":"hi","parts":[]}`)
	status, _ = post(t, srv.url, d.token(t), d.body)
	require.Equal(t, http.StatusInternalServerError, status, "a callback error fails the dispatch")

	d = newDispatch(t, "made_up", `{}`)
	status, _ = post(t, srv.url, d.token(t), d.body)
	require.Equal(t, http.StatusBadRequest, status)

	req, err := http.NewRequest(http.MethodGet, srv.url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

// The verifier tolerates DefaultLeeway of skew on exp and nbf unless
// WithLeeway says otherwise; WithLeeway(0) checks them exactly.
func TestDefaultLeeway(t *testing.T) {
	t.Parallel()
	d := newDispatch(t, agenthooks.EventPreToolUse, toolData())
	d.claims.Expires = now.Add(-agenthooks.DefaultLeeway + time.Second).Unix()
	tok := d.token(t)
	clock := agenthooks.WithClock(func() time.Time { return now })
	_, _, err := agenthooks.NewVerifier(secretA, audience, clock).Verify("Bearer "+tok, d.body)
	require.NoError(t, err, "expired by less than the default leeway")
	_, _, err = agenthooks.NewVerifier(secretA, audience, clock, agenthooks.WithLeeway(0)).Verify("Bearer "+tok, d.body)
	var ve *agenthooks.VerifyError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, agenthooks.CheckTime, ve.Check)

	d = newDispatch(t, agenthooks.EventPreToolUse, toolData())
	d.claims.NotBefore = now.Add(agenthooks.DefaultLeeway - time.Second).Unix()
	_, _, err = agenthooks.NewVerifier(secretA, audience, clock).Verify("Bearer "+d.token(t), d.body)
	require.NoError(t, err, "not valid for less than the default leeway yet")
}
