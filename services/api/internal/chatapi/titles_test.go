package chatapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/services/api/internal/chatapi"
)

// titleProbe holds generated titles back before their write and reports
// each generation's outcome.
type titleProbe struct {
	t       *testing.T
	hold    chan struct{} // closed: writes proceed
	entered chan uuid.UUID
	written chan titleOutcome
}

type titleOutcome struct {
	chat    uuid.UUID
	title   string
	applied bool
	err     error
}

func newTitleProbe(t *testing.T) *titleProbe {
	return &titleProbe{t: t, hold: make(chan struct{}), entered: make(chan uuid.UUID, 16), written: make(chan titleOutcome, 16)}
}

func (p *titleProbe) option() apiOption {
	return func(cfg *chatapi.AppConfig) {
		cfg.TitleHooks = chatapi.TitleHooks{
			BeforeWrite: func(ctx context.Context, chat uuid.UUID) {
				p.entered <- chat
				select {
				case <-p.hold:
				case <-ctx.Done():
				}
			},
			AfterWrite: func(chat uuid.UUID, title string, applied bool, err error) {
				p.written <- titleOutcome{chat: chat, title: title, applied: applied, err: err}
			},
		}
	}
}

// waitEntered waits until chat's generated title is ready to be written.
func (p *titleProbe) waitEntered(chat string) {
	p.t.Helper()
	select {
	case got := <-p.entered:
		require.Equal(p.t, chat, got.String())
	case <-time.After(30 * time.Second):
		p.t.Fatalf("title generation of chat %s never reached its write", chat)
	}
}

func (p *titleProbe) waitWritten(chat string) titleOutcome {
	p.t.Helper()
	select {
	case got := <-p.written:
		require.Equal(p.t, chat, got.chat.String())
		require.NoError(p.t, got.err)
		return got
	case <-time.After(30 * time.Second):
		p.t.Fatalf("title generation of chat %s never ended", chat)
	}
	return titleOutcome{}
}

func (a *fixture) chatTitle(id string) (title, source string) {
	a.t.Helper()
	r := a.call("GET", "/api/v2/chats/"+id, a.user.token, nil)
	require.Equal(a.t, http.StatusOK, r.code, "%s", r.raw)
	return r.str("title"), r.str("title_source")
}

// TestTitleGeneratedInBackground: the create answers with the fallback title
// while the model's title is still held back; the generated title replaces
// it afterwards.
func TestTitleGeneratedInBackground(t *testing.T) {
	t.Parallel()
	p := newTitleProbe(t)
	a := setup(t, p.option())

	r := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{
		"content": textContent("  Plan a   trip to Lisbon\n::title Lisbon trip plan"),
	})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	id := r.str("id")
	require.Equal(t, "Plan a trip to Lisbon", r.str("title"), "the fallback is the prompt's first line")
	require.Equal(t, "fallback", r.str("title_source"))

	// The model already answered, and the write is held: the create did
	// not wait for it.
	p.waitEntered(id)
	title, source := a.chatTitle(id)
	require.Equal(t, "Plan a trip to Lisbon", title)
	require.Equal(t, "fallback", source)

	close(p.hold)
	out := p.waitWritten(id)
	require.True(t, out.applied)
	require.Equal(t, "Lisbon trip plan", out.title)
	title, source = a.chatTitle(id)
	require.Equal(t, "Lisbon trip plan", title)
	require.Equal(t, "generated", source)
}

// TestTitleUserWins: a title the user sets while generation is in flight is
// never overwritten by the late generated title.
func TestTitleUserWins(t *testing.T) {
	t.Parallel()
	p := newTitleProbe(t)
	a := setup(t, p.option())

	r := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"content": textContent("Draft the release notes")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	id := r.str("id")
	p.waitEntered(id)

	r = a.call("PATCH", "/api/v2/chats/"+id, a.user.token, map[string]any{"title": "My notes"})
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	require.Equal(t, "user", r.str("title_source"))

	close(p.hold)
	out := p.waitWritten(id)
	require.False(t, out.applied, "the UPDATE's guard keeps the user title")
	require.Equal(t, "Title: Draft the release notes", out.title, "the scripted model's answer without ::title")
	title, source := a.chatTitle(id)
	require.Equal(t, "My notes", title)
	require.Equal(t, "user", source)

	// A chat created with a title gets no generation at all; its title is
	// the user's from the start.
	r = a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"title": "Fixed", "content": textContent("::title Other")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	require.Equal(t, "Fixed", r.str("title"))
	require.Equal(t, "user", r.str("title_source"))
}

// TestTitleEmptyCreate: a chat created without content is "New Chat"; its
// first message writes the fallback title in the same transition and starts
// generation.
func TestTitleEmptyCreate(t *testing.T) {
	t.Parallel()
	p := newTitleProbe(t)
	a := setup(t, p.option())

	r := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	id := r.str("id")
	require.Equal(t, chatapi.DefaultTitle, r.str("title"))
	require.Equal(t, "fallback", r.str("title_source"))

	r = a.call("POST", "/api/v2/chats/"+id+"/messages", a.user.token, map[string]any{
		"content": textContent("Summarize the meeting\n::title Meeting summary"),
	})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	title, source := a.chatTitle(id)
	require.Equal(t, "Summarize the meeting", title, "the first prompt's fallback, written with the message")
	require.Equal(t, "fallback", source)

	p.waitEntered(id)
	close(p.hold)
	out := p.waitWritten(id)
	require.True(t, out.applied)
	title, source = a.chatTitle(id)
	require.Equal(t, "Meeting summary", title)
	require.Equal(t, "generated", source)
}

// TestTitleRetriesUseTheGenerationRetryLimit: a title request that fails
// with retryable errors is retried up to the generation retry limit, with
// its own budget: 7 failures and a limit of 7 retries end in a generated
// title, 8 failures leave the fallback.
func TestTitleRetriesUseTheGenerationRetryLimit(t *testing.T) {
	t.Parallel()
	p := newTitleProbe(t)
	close(p.hold)
	a := setup(t, p.option(), func(cfg *chatapi.AppConfig) {
		cfg.Config.MaxGenerationRetries = 7
		cfg.Config.RetryBaseDelay, cfg.Config.RetryMaxDelay = time.Millisecond, time.Millisecond
	})

	r := a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"content": textContent("Plan a trip\n::title Trip\n::title-fail retryable 7")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	out := p.waitWritten(r.str("id"))
	require.True(t, out.applied)
	require.Equal(t, "Trip", out.title)

	r = a.call("POST", "/api/v2/chats", a.user.token, map[string]any{"content": textContent("Plan a walk\n::title Walk\n::title-fail retryable 8")})
	require.Equal(t, http.StatusCreated, r.code, "%s", r.raw)
	select {
	case got := <-p.written:
		require.Equal(t, r.str("id"), got.chat.String())
		require.Error(t, got.err, "the eighth retry is past the limit")
		require.False(t, got.applied)
	case <-time.After(30 * time.Second):
		t.Fatal("the title generation never ended")
	}
	title, source := a.chatTitle(r.str("id"))
	require.Equal(t, "Plan a walk", title)
	require.Equal(t, "fallback", source)
}
