package chatapi

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/llm"
	// Registers every model implementation with llm.Open.
	_ "github.com/chatd/chatd/pkg/llm/providers"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/telemetry"
)

// Automatic title generation (spec "POST /api/v2/chats"): a chat created
// without a title gets a fallback title from its first prompt at once, and
// the chat's model is asked for a better one in the background; the
// response never waits for it. The generated title is written with source
// "generated" through ChatSetTitle, whose UPDATE applies only while the
// stored source ranks no higher (fallback < generated < user), so a title
// the user set first is never overwritten. A chat created without content
// is titled "New Chat", and both steps happen at its first message instead.
//
// The work runs in the api process, on a context that outlives the request
// and ends when the server closes (Close). It is best-effort: retryable
// model errors are retried up to Config.MaxGenerationRetries times (spec:
// background generation retries with the generation retry limit, each call
// with its own budget), within titleTimeout, and a generation that fails
// leaves the fallback title.

// Title generation limits.
const (
	titleTimeout   = 2 * time.Minute
	titleBaseDelay = 500 * time.Millisecond
	titleMaxDelay  = 10 * time.Second
)

// titleSystemPrompt asks for a title.
const titleSystemPrompt = "You name chat conversations. Reply with a short, specific title " +
	"(at most 8 words) for the conversation that starts with the user's message. " +
	"Reply with the title only: no quotes, no trailing punctuation, no explanation."

// titleJob is one title to generate.
type titleJob struct {
	chatID, orgID uuid.UUID
	modelConfigID *uuid.UUID
	prompt        string
}

// TitleHooks observe background title generation; tests use them to hold a
// generated title back and to learn when it was written.
type TitleHooks struct {
	// BeforeWrite runs after the model answered, before the generated
	// title is written.
	BeforeWrite func(ctx context.Context, chatID uuid.UUID)
	// AfterWrite runs when a generation ends: applied says whether the
	// generated title was stored (false when a user title was there, the
	// model gave none, or err).
	AfterWrite func(chatID uuid.UUID, title string, applied bool, err error)
	// Skipped runs when a chat's generation is not started: the server is
	// closing or MaxTitleGenerations are running.
	Skipped func(chatID uuid.UUID)
	// Stages records the generations' background stages
	// (titles_telemetry.go) and the api's other stages (the queue_wait of
	// the prompts it promotes); nil uses the otel global providers.
	Stages *telemetry.Stages
}

// titleWork tracks the background title generations of a Server; its zero
// value is ready to use.
type titleWork struct {
	hooks TitleHooks
	// max bounds the generations running at once (0: no bound); running
	// counts them.
	max     int
	running int

	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	closed bool
	wg     sync.WaitGroup
}

// start runs fn in the background unless the server is closing or max
// generations are running; it reports whether fn was started.
func (w *titleWork) start(fn func(ctx context.Context)) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || (w.max > 0 && w.running >= w.max) {
		return false
	}
	if w.ctx == nil {
		w.ctx, w.cancel = context.WithCancel(context.Background())
	}
	w.running++
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() {
			w.mu.Lock()
			w.running--
			w.mu.Unlock()
		}()
		fn(w.ctx)
	}()
	return true
}

// close cancels the running generations and waits for them.
func (w *titleWork) close() {
	w.mu.Lock()
	w.closed = true
	if w.cancel != nil {
		w.cancel()
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// Close stops the server's background work (title generation) and waits
// for it. Call it before closing the database pool.
func (s *Server) Close() { s.titles.close() }

// WaitTitles waits for the title generations started so far (tests).
func (s *Server) WaitTitles() { s.titles.wg.Wait() }

// titleAfterCreate starts title generation for a chat just created with a
// fallback title from its prompt (never for a user title or an empty
// create, whose first message starts it instead).
func (s *Server) titleAfterCreate(p chatstate.CreateParams, content chatmsg.Content) {
	if p.TitleSource != queries.ChatTitleSourceFallback || len(content) == 0 {
		return
	}
	s.startTitle(&titleJob{chatID: p.ID, orgID: p.OrganizationID, modelConfigID: p.ModelConfigID, prompt: content.PlainText()})
}

// firstPromptTitle runs inside SendMessage's transition: when the message
// was inserted into a chat still titled "New Chat" by fallback (created
// without content), it writes the fallback title from this prompt and
// returns the title job to start after commit.
func (s *Server) firstPromptTitle(ctx context.Context, tx *chatstate.Tx, msg chatstate.NewMessage, res chatstate.SendMessageResult) (*titleJob, error) {
	chat := tx.Chat()
	if res.Message == nil || chat.TitleSource != queries.ChatTitleSourceFallback || chat.Title != DefaultTitle {
		return nil, nil
	}
	prompt := msg.Content.PlainText()
	title := fallbackTitle(prompt)
	if title == DefaultTitle {
		return nil, nil // nothing to name it after yet
	}
	_, err := tx.Queries().ChatSetTitle(ctx, queries.ChatSetTitleParams{
		ID: chat.ID, Title: title, TitleSource: queries.ChatTitleSourceFallback, Now: s.now(),
	})
	if err != nil && !isNoRows(err) {
		return nil, err
	}
	model := msg.ModelConfigID
	if model == nil {
		model = chat.LastModelConfigID
	}
	return &titleJob{chatID: chat.ID, orgID: chat.OrganizationID, modelConfigID: model, prompt: prompt}, nil
}

// startTitle generates job's title in the background; nil does nothing.
func (s *Server) startTitle(job *titleJob) {
	if job == nil || strings.TrimSpace(job.prompt) == "" {
		return
	}
	if !s.titles.start(func(ctx context.Context) { s.generateTitle(ctx, *job) }) {
		s.log.Info("title generation skipped: the server is closing or CHATD_MAX_TITLE_GENERATIONS are running; the chat keeps its fallback title",
			slog.String("chat_id", job.chatID.String()))
		if hook := s.titles.hooks.Skipped; hook != nil {
			hook(job.chatID)
		}
	}
}

// generateTitle asks the model for a title and writes it as a generated
// title, unless a user title is stored by then.
func (s *Server) generateTitle(ctx context.Context, job titleJob) {
	ctx, cancel := context.WithTimeout(s.titles.titleContext(ctx), titleTimeout)
	defer cancel()
	title, applied, err := s.writeGeneratedTitle(ctx, job)
	if hook := s.titles.hooks.AfterWrite; hook != nil {
		hook(job.chatID, title, applied, err)
	}
}

func (s *Server) writeGeneratedTitle(ctx context.Context, job titleJob) (string, bool, error) {
	log := s.log.With(slog.String("chat_id", job.chatID.String()))
	title, err := s.titleFromModel(ctx, job)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("title generation failed; the chat keeps its fallback title", slog.String("error", err.Error()))
		}
		return "", false, err
	}
	if title == "" {
		log.Info("title generation returned no title; the chat keeps its fallback title")
		return "", false, nil
	}
	if hook := s.titles.hooks.BeforeWrite; hook != nil {
		hook(ctx, job.chatID)
	}
	_, err = s.q.ChatSetTitle(ctx, queries.ChatSetTitleParams{
		ID: job.chatID, Title: title, TitleSource: queries.ChatTitleSourceGenerated, Now: s.now(),
	})
	switch {
	case isNoRows(err):
		// The UPDATE's guard: a user title outranks a generated one.
		log.Debug("generated title not applied: the chat has a user title")
		return title, false, nil
	case err != nil:
		if ctx.Err() == nil {
			log.Warn("writing the generated title failed", slog.String("error", err.Error()))
		}
		return title, false, err
	}
	return title, true, nil
}

// titleFromModel runs the title request on the chat's model, retrying
// retryable errors.
func (s *Server) titleFromModel(ctx context.Context, job titleJob) (string, error) {
	cfg, err := s.models.ResolveForChat(ctx, job.orgID, job.modelConfigID)
	if err != nil && job.modelConfigID != nil && errors.Is(err, modelconfig.ErrInvalid) {
		cfg, err = s.models.ResolveForChat(ctx, job.orgID, nil)
	}
	if err != nil {
		return "", err
	}
	prov, err := s.models.GetProvider(ctx, cfg.ProviderID)
	if err != nil {
		return "", err
	}
	model, err := llm.Open(prov, cfg)
	if err != nil {
		return "", err
	}
	req := llm.Request{
		System:   titleSystemPrompt,
		Messages: []llm.Message{{Role: llm.RoleUser, Parts: []chatmsg.Part{chatmsg.Text(job.prompt)}}},
		Purpose:  llm.PurposeTitle,
	}
	delay := s.cfg.RetryBaseDelay
	for attempt := 1; ; attempt++ {
		req.Attempt = attempt
		resp, err := titleAttempt(ctx, model, req)
		if err == nil {
			return cleanTitle(resp.Content.PlainText()), nil
		}
		if !llm.IsRetryable(err) || attempt > s.cfg.MaxGenerationRetries {
			return "", err
		}
		t, wait := time.NewTimer(delay), titleBackoff(ctx, attempt)
		select {
		case <-ctx.Done():
			t.Stop()
			wait.End(nil)
			return "", ctx.Err()
		case <-t.C:
		}
		wait.End(nil)
		delay = min(delay*2, s.cfg.RetryMaxDelay)
	}
}

// cleanTitle turns a model's answer into a title: its first non-blank line,
// without surrounding quotes, markdown heading marks or a trailing period,
// whitespace collapsed, cut like a fallback title.
func cleanTitle(answer string) string {
	line := ""
	for _, l := range strings.Split(answer, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			line = l
			break
		}
	}
	line = strings.TrimLeft(line, "# ")
	for {
		before := line
		line = strings.TrimSpace(line)
		line = strings.TrimSuffix(line, ".")
		for _, q := range []string{`"`, "'", "`", "“", "”", "*"} {
			line = strings.TrimPrefix(strings.TrimSuffix(line, q), q)
		}
		if line == before {
			break
		}
	}
	if line == "" {
		return ""
	}
	if utf8.RuneCountInString(line) > fallbackTitleLen {
		line = fallbackTitle(line)
	}
	return line
}
