package apiserver

import (
	"context"
	"log/slog"
	"time"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatfiles"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/cors"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/services/api/internal/chatapi"
)

// name is the service's short name: its health service is "chatd.v1.api".
const name = "api"

// Config holds the api service's settings.
type Config struct {
	service.Common
	// HTTPAddr is where the REST facade (/api/v2) listens.
	HTTPAddr string
	// AuthSecret verifies HS256 bearer tokens.
	AuthSecret string
	// JWKSURL serves the keys of RS256/ES256 bearer tokens.
	JWKSURL string
	// MaxMessageBytes and MaxQueuedMessages are the input limits.
	MaxMessageBytes   int
	MaxQueuedMessages int
	// MaxAttachmentsPerChat and MaxAttachmentBytes bound attachments.
	MaxAttachmentsPerChat int
	MaxAttachmentBytes    int
	// MaxMessageParts and MaxMessageFiles bound one message.
	MaxMessageParts int
	MaxMessageFiles int
	// RateLimitPerSecond and RateLimitBurst are the per-user request rate.
	RateLimitPerSecond float64
	RateLimitBurst     int
	// MaxTitleGenerations bounds concurrent background title generations.
	MaxTitleGenerations int
	// MaxGenerationRetries bounds the retries of a background model call.
	MaxGenerationRetries int
	// RequiresActionTimeout is the dynamic-tool deadline.
	RequiresActionTimeout time.Duration
	// Hooks are the lifecycle hook settings (CHATD_HOOK_*).
	Hooks hooks.Config
	// CORS is CHATD_CORS_ALLOWED_ORIGINS.
	CORS cors.Policy
	// RelayAddr is the relay service's gRPC address: the /v1 streams show
	// the live parts it forwards ("" for none).
	RelayAddr string
}

// Declare adds the api's settings to v.
func (c *Config) Declare(v *service.Vars) {
	c.DeclareCommon(v, ":7001")
	c.Hooks.Declare(v)
	c.DeclareSecrets(v)
	v.Addr(&c.HTTPAddr, "CHATD_HTTP_ADDR", ":8080",
		"host:port the REST facade (/api/v2) and /healthz listen on.", false)
	v.Secret(&c.AuthSecret, auth.EnvSecret, auth.MinSecretLen,
		"HMAC key (at least 32 bytes) that verifies HS256 bearer tokens.")
	v.String(&c.JWKSURL, auth.EnvJWKSURL, "",
		"URL of a JWKS whose keys verify RS256/ES256 bearer tokens (optional; with or instead of CHATD_AUTH_SECRET).")
	v.Int(&c.MaxMessageBytes, "CHATD_MAX_MESSAGE_BYTES", chatapi.DefaultMaxMessageBytes, 1,
		"Largest message text accepted, in bytes (413 beyond it).")
	v.Int(&c.MaxQueuedMessages, "CHATD_MAX_QUEUED_MESSAGES", chatapi.DefaultMaxQueuedMessages, 1,
		"Most messages a chat may have queued (409 beyond it).")
	v.Int(&c.MaxAttachmentsPerChat, "CHATD_MAX_ATTACHMENTS_PER_CHAT", chatfiles.DefaultMaxPerChat, 1,
		"Most files a chat holds; attaching more evicts the chat's earliest uploads (their messages show them as expired).")
	v.Int(&c.MaxAttachmentBytes, "CHATD_MAX_ATTACHMENT_BYTES", chatapi.DefaultMaxAttachmentBytes, 1,
		"Largest upload accepted by POST /api/v2/files, in bytes (413 beyond it).")
	v.Int(&c.MaxMessageParts, "CHATD_MAX_MESSAGE_PARTS", chatapi.DefaultMaxMessageParts, 1,
		"Most parts one message (or one tool-results call) may carry (413 beyond it).")
	v.Int(&c.MaxMessageFiles, "CHATD_MAX_MESSAGE_FILES", chatapi.DefaultMaxMessageFiles, 1,
		"Most file parts one message may carry (413 beyond it).")
	v.Float(&c.RateLimitPerSecond, "CHATD_RATE_LIMIT_PER_SECOND", chatapi.DefaultRateLimitPerSecond, 0,
		"Average REST/gRPC requests a second each user may make in one organization (429 with Retry-After beyond it); 0 is no limit.")
	v.Int(&c.RateLimitBurst, "CHATD_RATE_LIMIT_BURST", chatapi.DefaultRateLimitBurst, 1,
		"Requests a user may make at once above CHATD_RATE_LIMIT_PER_SECOND (the token bucket's size).")
	v.Int(&c.MaxTitleGenerations, "CHATD_MAX_TITLE_GENERATIONS", chatapi.DefaultMaxTitleGenerations, 1,
		"Background title generations running at once; a chat created while all are busy keeps its fallback title.")
	v.Int(&c.MaxGenerationRetries, "CHATD_MAX_GENERATION_RETRIES", chatapi.DefaultMaxGenerationRetries, 0,
		"Retries of a failed background model call (a chat title; retryable errors only), the worker's generation retry limit; 0 is no retries.")
	v.Duration(&c.RequiresActionTimeout, "CHATD_REQUIRES_ACTION_TIMEOUT", chatstate.DefaultRequiresActionTimeout,
		"How long a chat waits for dynamic tool results before the worker cancels the calls.")
	v.Addr(&c.RelayAddr, "CHATD_RELAY_ADDR", "127.0.0.1:7004",
		"host:port of the relay service, whose live message parts the /v1 streams show token by token; empty shows each model step once it is committed.", true)
	v.Var(cors.Env, "", cors.Usage, func(raw string) (err error) { c.CORS, err = cors.Parse(raw); return err })
	c.RequireDatabase(v, errNoDatabase)
	v.Check(func() error {
		if c.AuthSecret == "" && c.JWKSURL == "" {
			return errNoAuth
		}
		return nil
	}, "CHATD_AUTH_SECRET", "CHATD_AUTH_JWKS_URL")
}

// Program describes the api binary for service.Main.
func Program() service.Program {
	cfg := &Config{}
	return service.Program{
		Name:    name,
		Summary: "chatd api: chatd.v1.ChatService over gRPC and its REST facade at /api/v2.",
		Config:  cfg,
		Run: func(ctx context.Context, log *slog.Logger) error {
			return Run(ctx, cfg, log)
		},
	}
}

// Run serves the api until ctx ends.
func Run(ctx context.Context, cfg *Config, log *slog.Logger) error {
	tel, stopTelemetry, err := telemetry.StartService(ctx, name, cfg.Embedded.Hosted(), log)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	dispatcher, err := hooks.New(cfg.Hooks, hooks.WithLogger(log), hooks.WithMeter(tel.MeterProvider.Meter("github.com/chatd/chatd/pkg/hooks")))
	if err != nil {
		return err
	}
	return chatapi.Serve(ctx, chatapi.AppConfig{
		Hooks:          dispatcher,
		MetricsHandler: tel.Handler,
		// Background title generation's stages (scope background).
		TitleHooks: chatapi.TitleHooks{Stages: telemetry.NewStages(telemetry.StagesOptions{
			TracerProvider: tel.TracerProvider, MeterProvider: tel.MeterProvider,
			DisableMetrics: !telemetry.StageMetricsEnabled(cfg.Hooks.Experiments),
		})},
		Config: chatapi.Config{
			MaxMessageBytes: cfg.MaxMessageBytes, MaxQueuedMessages: cfg.MaxQueuedMessages,
			MaxAttachmentsPerChat: cfg.MaxAttachmentsPerChat, MaxAttachmentBytes: int64(cfg.MaxAttachmentBytes),
			MaxMessageParts: cfg.MaxMessageParts, MaxMessageFiles: cfg.MaxMessageFiles,
			RateLimitPerSecond: cfg.RateLimitPerSecond, RateLimitBurst: cfg.RateLimitBurst,
			MaxTitleGenerations: cfg.MaxTitleGenerations, MaxGenerationRetries: cfg.MaxGenerationRetries,
		},
		DatabaseURL:           cfg.DatabaseURL,
		DB:                    cfg.DB,
		DBTracer:              cfg.Embedded.DBTracer,
		DBMeter:               tel.MeterProvider,
		NATSURL:               cfg.NATSURL,
		RelayAddr:             cfg.RelayAddr,
		RelayDialOptions:      cfg.Embedded.DialOptions,
		Auth:                  auth.Config{Secret: []byte(cfg.AuthSecret), JWKSURL: cfg.JWKSURL},
		RequiresActionTimeout: cfg.RequiresActionTimeout,
		GRPCAddr:              cfg.GRPCAddr,
		HTTPAddr:              cfg.HTTPAddr,
		GRPCListener:          cfg.Embedded.GRPCListener,
		HTTPListener:          cfg.Embedded.HTTPListener,
		ShutdownTimeout:       cfg.ShutdownTimeout,
		Log:                   log,
		CORS:                  cfg.CORS,
		Secrets:               cfg.Secrets,
	})
}

// errNoDatabase refuses an api without Postgres: it keeps every chat there.
var errNoDatabase = errorString("CHATD_DATABASE_URL is required: the api keeps every chat in Postgres")

var errNoAuth = errorString("set CHATD_AUTH_SECRET (HS256) or CHATD_AUTH_JWKS_URL (RS256/ES256): the api accepts only authenticated requests")

type errorString string

func (e errorString) Error() string { return string(e) }
