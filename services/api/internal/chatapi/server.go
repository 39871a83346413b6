// Package chatapi implements chatd.v1.ChatService: every endpoint of the
// REST facade, each through exactly the state-machine transitions the spec
// gives for it.
package chatapi

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatfiles"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/secrets"
)

// Config holds the API's limits.
type Config struct {
	// MaxMessageBytes bounds a message's text (413 beyond it).
	MaxMessageBytes int
	// MaxQueuedMessages bounds a chat's queue (409 beyond it).
	MaxQueuedMessages int
	// MaxAttachmentsPerChat caps the files a chat holds; linking more
	// evicts the chat's earliest uploads (chatfiles.Link). 0 (unset)
	// means chatfiles.DefaultMaxPerChat; a negative cap fails every write
	// that persists message content.
	MaxAttachmentsPerChat int
	// MaxAttachmentBytes bounds one upload; 0 means
	// DefaultMaxAttachmentBytes.
	MaxAttachmentBytes int64
	// MaxMessageParts and MaxMessageFiles bound one message's parts and
	// its file parts, checked before any part is looked at (413); 0 means
	// the default.
	MaxMessageParts int
	MaxMessageFiles int
	// RateLimitPerSecond and RateLimitBurst are the per-user request rate
	// (a token bucket per user and organization; 429 with Retry-After
	// beyond it). A RateLimitPerSecond of 0 is no limit.
	RateLimitPerSecond float64
	RateLimitBurst     int
	// MaxTitleGenerations bounds the background title generations running
	// at once; a chat created while they are all busy keeps its fallback
	// title. 0 means the default.
	MaxTitleGenerations int
	// MaxGenerationRetries is how often a background model call (a chat
	// title) is retried after a retryable error, the worker's generation
	// retry limit (CHATD_MAX_GENERATION_RETRIES); each call has its own
	// budget. 0 is no retries.
	MaxGenerationRetries int
	// RetryBaseDelay and RetryMaxDelay are those retries' backoff: the
	// first delay, doubling up to the most. 0 means 500 ms and 10 s.
	RetryBaseDelay, RetryMaxDelay time.Duration
}

// Defaults for Config.
const (
	DefaultMaxMessageBytes     = 256 << 10
	DefaultMaxQueuedMessages   = 50
	DefaultMaxMessageParts     = 100
	DefaultMaxMessageFiles     = 10
	DefaultMaxTitleGenerations = 8
	// DefaultMaxGenerationRetries is the worker's default generation
	// retry limit, which background model calls share.
	DefaultMaxGenerationRetries = 25
)

// Server implements chatdv1.ChatServiceServer.
type Server struct {
	chatdv1.UnimplementedChatServiceServer

	cfg     Config
	pool    *pgxpool.Pool
	q       *queries.Queries
	machine *chatstate.Machine
	models  *modelconfig.Store
	secrets *secrets.Keyring
	log     *slog.Logger
	newID   func() uuid.UUID
	now     func() time.Time

	// seen caches callers whose user and organization rows exist.
	seen sync.Map
	// titles is the background title generation (titles.go).
	titles titleWork
	// hooks is the lifecycle hook dispatcher (hooks.go); nil is inactive.
	hooks *hooks.Dispatcher
	// limit is the per-user request rate (ratelimit.go).
	limit *RateLimiter
}

// Deps are what a Server needs.
type Deps struct {
	Pool    *pgxpool.Pool
	Machine *chatstate.Machine
	Models  *modelconfig.Store
	Log     *slog.Logger
	// NewID and Now are injectable for deterministic tests.
	NewID func() uuid.UUID
	Now   func() time.Time
	// TitleHooks observe background title generation (tests).
	TitleHooks TitleHooks
	// Hooks dispatches lifecycle hooks (user_prompt_submit at admission);
	// nil dispatches nothing.
	Hooks *hooks.Dispatcher
	// Secrets encrypts the MCP servers' credentials the api stores
	// (CHATD_SECRETS_KEYS); nil stores them as they are. Models encrypts
	// the providers' keys with its own (modelconfig.WithKeys).
	Secrets *secrets.Keyring
}

// New returns a Server.
func New(cfg Config, d Deps) *Server {
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.MaxQueuedMessages <= 0 {
		cfg.MaxQueuedMessages = DefaultMaxQueuedMessages
	}
	if cfg.MaxMessageParts <= 0 {
		cfg.MaxMessageParts = DefaultMaxMessageParts
	}
	if cfg.MaxMessageFiles <= 0 {
		cfg.MaxMessageFiles = DefaultMaxMessageFiles
	}
	if cfg.MaxAttachmentsPerChat == 0 {
		cfg.MaxAttachmentsPerChat = chatfiles.DefaultMaxPerChat
	}
	if cfg.MaxTitleGenerations <= 0 {
		cfg.MaxTitleGenerations = DefaultMaxTitleGenerations
	}
	if cfg.RetryBaseDelay <= 0 {
		cfg.RetryBaseDelay = titleBaseDelay
	}
	if cfg.RetryMaxDelay <= 0 {
		cfg.RetryMaxDelay = titleMaxDelay
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.NewID == nil {
		d.NewID = uuid.New
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Server{
		cfg: cfg, pool: d.Pool, q: queries.New(d.Pool), machine: d.Machine, models: d.Models, secrets: d.Secrets,
		log: d.Log, newID: d.NewID, now: d.Now,
		titles: titleWork{hooks: d.TitleHooks, max: cfg.MaxTitleGenerations},
		limit:  NewRateLimiter(cfg.RateLimitPerSecond, cfg.RateLimitBurst, d.Now),
		hooks:  d.Hooks,
	}
}

// caller returns the authenticated caller, creating their user and
// organization rows on first sight.
func (s *Server) caller(ctx context.Context) (auth.Claims, error) {
	c, ok := auth.ClaimsFrom(ctx)
	if !ok {
		return c, status.Error(codes.Unauthenticated, "a bearer token is required")
	}
	key := c.UserID.String() + "/" + c.OrganizationID.String()
	if _, ok := s.seen.Load(key); ok {
		return c, nil
	}
	if err := ensureCaller(ctx, s.q, c); err != nil {
		return c, s.fail(ctx, err)
	}
	s.seen.Store(key, true)
	return c, nil
}

// ensureCaller creates the caller's organization, user and membership rows
// unless they exist.
func ensureCaller(ctx context.Context, q *queries.Queries, c auth.Claims) error {
	if err := q.OrganizationEnsure(ctx, queries.OrganizationEnsureParams{ID: c.OrganizationID}); err != nil {
		return err
	}
	if err := q.UserEnsure(ctx, queries.UserEnsureParams{ID: c.UserID}); err != nil {
		return err
	}
	return q.OrganizationMemberEnsure(ctx, queries.OrganizationMemberEnsureParams{OrganizationID: c.OrganizationID, UserID: c.UserID})
}

// errNotYours reads exactly like a missing chat: someone else's chat is not
// acknowledged to exist.
var errNotYours = statusError(codes.NotFound, ReasonChatNotFound, "The chat was not found.")

// readChat loads a chat the caller owns.
func (s *Server) readChat(ctx context.Context, c auth.Claims, rawID string) (queries.Chat, error) {
	id, err := parseID("chat_id", rawID)
	if err != nil {
		return queries.Chat{}, err
	}
	snap, err := s.machine.Get(ctx, id)
	if err != nil {
		return queries.Chat{}, s.fail(ctx, err)
	}
	if !c.Owns(snap.Chat.OwnerID, snap.Chat.OrganizationID) {
		return queries.Chat{}, errNotYours
	}
	return snap.Chat, nil
}

// update runs fn as one transition bundle on a chat the caller owns; the
// owner check happens under the bundle's row lock, before any mutation.
func (s *Server) update(ctx context.Context, c auth.Claims, rawID string, fn func(*chatstate.Tx) error, opts ...chatstate.BundleOption) (chatstate.Result, error) {
	id, err := parseID("chat_id", rawID)
	if err != nil {
		return chatstate.Result{}, err
	}
	var promoted []time.Time
	var chat queries.Chat
	res, err := s.machine.Update(ctx, id, func(tx *chatstate.Tx) error {
		if !c.Owns(tx.Chat().OwnerID, tx.Chat().OrganizationID) {
			return errNotYours
		}
		err := fn(tx)
		promoted, chat = tx.PromotedQueuedAt(), tx.Chat()
		return err
	}, opts...)
	if err != nil {
		return res, s.fail(ctx, err)
	}
	s.recordQueueWaits(ctx, chat, promoted)
	return res, nil
}

// fail maps err to a status once, logging what is unexpected.
func (s *Server) fail(ctx context.Context, err error) error {
	var replay *replayError
	if errors.As(err, &replay) {
		return err
	}
	return toStatus(s.log, methodName(ctx), err)
}
