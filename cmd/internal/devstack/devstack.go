// Package devstack runs chatd's four services in one process for
// development (`chatd dev`): the real nats-server in-process, Postgres
// from a URL or a cluster kept under the data directory, migrations, and
// api, worker, relay and stream behind one HTTP port routed as production
// routes them. The services talk over an in-memory network
// (service.InProcess), so live parts still flow worker → relay → stream
// through the same gRPC interfaces without a socket.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/chatd/chatd/pkg/db/migrate"
	"github.com/chatd/chatd/pkg/secrets"
	"github.com/chatd/chatd/pkg/service"
)

// Config is what `chatd dev` is told; zero values are the defaults.
type Config struct {
	// DataDir keeps the Postgres cluster, the auth secret, the key that
	// encrypts stored credentials (unless CHATD_SECRETS_KEYS is set), the
	// dev identity and the dev token between runs. Default ".chatd".
	DataDir string
	// DatabaseURL, when set, is used instead of a cluster under DataDir.
	DatabaseURL string
	// HTTPAddr is the one HTTP port everything is served on. Default
	// "127.0.0.1:8080"; ":0" picks a free port (tests).
	HTTPAddr string
	// Getenv reads the services' own CHATD_* settings and the provider
	// keys (OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY). Default
	// os.Getenv.
	Getenv func(string) string
	// Log receives every service's logs, each with a "service" attribute.
	Log *slog.Logger
	// UI serves "/" (the web UI); nil serves a short text page.
	UI http.Handler
}

// Ready is what a started stack tells its caller.
type Ready struct {
	// URL is the stack's base URL ("http://127.0.0.1:8080").
	URL string
	// Token is a bearer token for the dev user (an admin of the dev
	// organization); it is also written to DataDir/dev-token.
	Token string
	// TokenFile is where the token was written.
	TokenFile string
	// DatabaseURL is the database the stack uses.
	DatabaseURL string
	// Providers names the real model providers configured from the
	// environment, if any.
	Providers []string
}

// Run starts the stack, calls ready once everything serves, and runs until
// ctx ends; then it stops every service, NATS and (if it started one) the
// Postgres cluster, and returns.
func Run(ctx context.Context, cfg Config, ready func(Ready)) (err error) {
	cfg.defaults()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("create the data directory %s: %w", cfg.DataDir, err)
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer lock.release()

	dbURL, stopDB, err := database(cfg)
	if err != nil {
		return err
	}
	defer stopDB()
	if err := migrate.Up(ctx, dbURL); err != nil {
		return fmt.Errorf("migrate %s: %w", redactURL(dbURL), err)
	}

	natsURL, stopNATS, err := startNATS()
	if err != nil {
		return err
	}
	defer stopNATS()

	id, err := loadIdentity(cfg.DataDir)
	if err != nil {
		return err
	}
	keys, keysSetting, err := loadSecretsKeys(cfg.DataDir, cfg.Getenv)
	if err != nil {
		return err
	}
	providers, err := configureProviders(ctx, dbURL, id, cfg.Getenv, keys)
	if err != nil {
		return err
	}

	lis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s (set --http or CHATD_DEV_HTTP_ADDR to use another address): %w", cfg.HTTPAddr, err)
	}
	network := service.NewInProcess()
	env := settings{getenv: cfg.Getenv, fixed: map[string]string{
		"CHATD_DATABASE_URL": dbURL,
		"CHATD_NATS_URL":     natsURL,
		"CHATD_AUTH_SECRET":  id.Secret,
		secrets.EnvKeys:      keysSetting,
		// Worker and relay would both bind one address: in one process
		// there are no separate metrics listeners.
		"CHATD_METRICS_ADDR": "",
	}}
	services, err := newServices(env, network)
	if err != nil {
		lis.Close()
		return err
	}

	announce := func(base string) error {
		token, tokenFile, err := writeToken(cfg.DataDir, id)
		if err != nil {
			return err
		}
		// Where it serves, for clients' --dev (ServingURL).
		lock.record(base)
		if ready != nil {
			ready(Ready{URL: base, Token: token, TokenFile: tokenFile, DatabaseURL: dbURL, Providers: providers})
		}
		return nil
	}
	return serve(ctx, cfg, lis, network, services, announce)
}

// serve runs the services, and the front HTTP server on lis, until ctx
// ends or one of them fails; once the front answers healthy it calls
// announce with its URL, and an error from announce stops the stack too.
// It returns every failure.
func serve(ctx context.Context, cfg Config, lis net.Listener, network *service.InProcess, services []hosted, announce func(base string) error) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(services)+1)
	for _, s := range services {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.run(runCtx, cfg.Log.With("service", s.name)); err != nil {
				errs <- fmt.Errorf("%s: %w", s.name, err)
				cancel() // one service failing stops the stack
			}
		}()
	}
	front := &http.Server{Handler: routes(network, cfg.UI), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := front.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("http: %w", err)
			cancel()
		}
	}()

	base := "http://" + lis.Addr().String()
	if err := waitHealthy(runCtx, base); err != nil {
		cancel()
	} else if err := announce(base); err != nil {
		errs <- err
		cancel()
	}

	<-runCtx.Done()
	shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	_ = front.Shutdown(shutdownCtx)
	stop()
	wg.Wait()
	close(errs)
	var all []error
	for e := range errs {
		all = append(all, e)
	}
	return errors.Join(all...)
}

func (c *Config) defaults() {
	if c.DataDir == "" {
		c.DataDir = ".chatd"
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:8080"
	}
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if abs, err := filepath.Abs(c.DataDir); err == nil {
		c.DataDir = abs
	}
}

// waitHealthy polls the front door's /healthz until every service answers.
func waitHealthy(ctx context.Context, base string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return errors.New("the services did not become healthy within 60s")
		case <-tick.C:
		}
	}
}
