package chatapi

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/cors"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/pkg/relayclient"
	"github.com/chatd/chatd/pkg/secrets"
	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/services/api/internal/openaiapi"
)

// AppConfig is everything the api service needs to run.
type AppConfig struct {
	Config
	// CORS answers browsers' cross-origin requests (CHATD_CORS_ALLOWED_ORIGINS).
	CORS        cors.Policy
	DatabaseURL string
	// DB bounds the pool and its sessions (CHATD_DB_*).
	DB dbpool.Settings
	// DBTracer, when set, also traces the pool (tests: the transaction
	// guard).
	DBTracer pgx.QueryTracer
	// DBMeter, when set, exports the pool's statistics.
	DBMeter metric.MeterProvider
	NATSURL string
	// RelayAddr is the relay service's gRPC address, whose live parts the
	// /v1 streams show token by token ("" for none), dialed with
	// RelayDialOptions (insecure by default).
	RelayAddr        string
	RelayDialOptions []grpc.DialOption
	Auth             auth.Config
	// RequiresActionTimeout is the dynamic-tool deadline (5m by default).
	RequiresActionTimeout time.Duration
	GRPCAddr, HTTPAddr    string
	// GRPCListener and HTTPListener, when set, are served instead of the
	// addresses (tests).
	GRPCListener, HTTPListener net.Listener
	ShutdownTimeout            time.Duration
	Log                        *slog.Logger
	// TitleHooks is Deps.TitleHooks (tests).
	TitleHooks TitleHooks
	// Hooks is Deps.Hooks: the lifecycle hook dispatcher (nil: none).
	Hooks *hooks.Dispatcher
	// MetricsHandler, when set, serves GET /metrics on the HTTP listener.
	MetricsHandler http.Handler
	// Secrets encrypts and decrypts stored credentials (CHATD_SECRETS_KEYS).
	Secrets *secrets.Keyring
}

// DefaultDBMaxConns is the api's pool size unless CHATD_DB_MAX_CONNS or the
// URL's pool_max_conns sets one: every request holds at most one
// connection at a time.
const DefaultDBMaxConns = 16

// Serve runs the api service until ctx ends: ChatService over gRPC, its
// REST facade over an in-process connection, notifications after commit.
func Serve(ctx context.Context, cfg AppConfig) error {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	if cfg.DatabaseURL == "" {
		return fmt.Errorf("CHATD_DATABASE_URL is required: the api keeps every chat in Postgres")
	}
	verifier, err := auth.NewVerifier(cfg.Auth)
	if err != nil {
		return err
	}
	pool, err := dbpool.New(ctx, cfg.DatabaseURL, cfg.DB, dbpool.Options{
		DefaultMaxConns: DefaultDBMaxConns, ApplicationName: "chatd-api", Tracer: cfg.DBTracer,
		MeterProvider: cfg.DBMeter,
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	// Stored credentials under a key the api lacks would fail every title
	// generation that needs them: refuse to start. One short read, made
	// even when a stop came meanwhile (then the service stops as usual).
	if err := secrets.CheckKeys(context.WithoutCancel(ctx), queries.New(pool), cfg.Secrets); err != nil {
		return err
	}
	nc, err := notify.Connect(cfg.NATSURL, "chatd-api")
	if err != nil {
		return err
	}
	defer nc.Close()

	machine := chatstate.New(pool, chatstate.Config{
		RequiresActionTimeout: cfg.RequiresActionTimeout,
		AfterCommit:           notify.NewPublisher(nc, log).AfterCommit,
	})
	srv := New(cfg.Config, Deps{Pool: pool, Machine: machine, Models: modelconfig.New(pool, modelconfig.WithKeys(cfg.Secrets)), Secrets: cfg.Secrets, Log: log, TitleHooks: cfg.TitleHooks, Hooks: cfg.Hooks})
	// Background title generation stops before the pool closes.
	defer srv.Close()
	maxBody := int64(srv.cfg.MaxMessageBytes)*2 + 64<<10 // JSON escaping and the other fields
	var relay *relayclient.Client
	if cfg.RelayAddr != "" {
		relay = relayclient.New(cfg.RelayAddr, cfg.RelayDialOptions...)
		defer relay.Close()
	}
	return service.Run(ctx, service.Options{
		Name:            "api",
		GRPCAddr:        cfg.GRPCAddr,
		GRPCListener:    cfg.GRPCListener,
		HTTPAddr:        cfg.HTTPAddr,
		HTTPListener:    cfg.HTTPListener,
		MetricsHandler:  cfg.MetricsHandler,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Logger:          log,
		CORS:            cfg.CORS,
		// The rate limit runs after authentication (its bucket is the
		// caller's) and before anything reads the request.
		UnaryInterceptors: []grpc.UnaryServerInterceptor{verifier.UnaryServerInterceptor(), ScopeUnary(), srv.limit.UnaryInterceptor(), ValidateTextUnary()},
		ServerOptions: []grpc.ServerOption{
			grpc.ChainStreamInterceptor(verifier.StreamServerInterceptor(), ScopeStream(), ValidateTextStream()),
		},
		Register: func(s grpc.ServiceRegistrar, mux *http.ServeMux) error {
			if mux != nil {
				files := &FilesHandler{Q: queries.New(pool), Verifier: verifier, MaxBytes: srv.maxAttachmentBytes(), Log: log, Limit: srv.limit}
				files.Register(mux)
				// The OpenAI-compatible surface calls the same ChatService
				// methods in process with the caller's claims.
				v1 := &openaiapi.Handler{Chats: srv, Q: queries.New(pool), Verifier: verifier, Limit: srv.limit, Log: log, MaxBody: maxBody, Stopping: ctx.Done(),
					Notify: nc, Relay: relay}
				v1.Register(mux)
			}
			chatdv1.RegisterChatServiceServer(s, srv)
			chatdv1.RegisterMcpServerServiceServer(s, srv.MCPServers())
			chatdv1.RegisterModelOverrideServiceServer(s, srv.ModelOverrides())
			return nil
		},
		RegisterGateway: func(conn grpc.ClientConnInterface, mux *http.ServeMux) error {
			gw, err := NewGateway(ctx, conn, maxBody)
			if err != nil {
				return err
			}
			mux.Handle(APIPrefix, gw)
			return nil
		},
	})
}
