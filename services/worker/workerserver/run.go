package workerserver

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/hooks"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/pkg/partbuf"
	"github.com/chatd/chatd/pkg/secrets"
	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/pkg/telemetry"
	"github.com/chatd/chatd/services/worker/internal/acquire"
	"github.com/chatd/chatd/services/worker/internal/autoarchive"
	"github.com/chatd/chatd/services/worker/internal/hookadapter"
	"github.com/chatd/chatd/services/worker/internal/manager"
	"github.com/chatd/chatd/services/worker/internal/mcptools"
	"github.com/chatd/chatd/services/worker/internal/runner"
	"github.com/chatd/chatd/services/worker/partsrpc"
)

// Run serves the worker until ctx ends, then drains: it stops acquiring,
// lets running turns finish for up to the drain time, and releases every
// chat it owns to the other replicas.
func Run(ctx context.Context, cfg *Config, log *slog.Logger) error {
	advertise, err := service.AdvertiseAddr(cfg.AdvertiseAddr, cfg.GRPCAddr)
	if err != nil {
		return err
	}
	if cfg.DatabaseURL == "" {
		return errNoDatabase
	}
	workerID := uuid.New()
	log = log.With("worker_id", workerID.String(), "advertise_addr", advertise,
		"lease", cfg.Lease().String(), "drain", cfg.Drain().String())

	conns, err := connect(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer conns.close()
	w := build(conns, cfg, workerID, advertise, log)
	defer w.close()

	// The components outlive ctx: they keep working through the drain.
	base := context.WithoutCancel(ctx)
	loops := w.start(base, log)
	defer loops.cancel()

	// gRPC keeps serving through the drain: relays still stream the parts
	// of the turns that are finishing.
	serveCtx, stopServing := context.WithCancel(base)
	defer stopServing()
	drained := make(chan error, 1)
	go func() {
		drained <- w.drain(ctx, serveCtx, cfg.Drain(), loops, log)
		stopServing()
	}()

	archiver := autoarchive.New(conns.pool, w.machine, autoarchive.Config{Days: cfg.AutoArchiveDays, Clock: w.clock, Logger: log})
	go func() { _ = archiver.Run(ctx) }() // stops at SIGTERM; returns at once when off

	err = serve(serveCtx, cfg, conns.tel, w.parts, log)
	stopServing() // a failed Run drains at once
	if derr := <-drained; derr != nil {
		log.Error("drain", "error", derr.Error())
	}
	return err
}

// connections are what the worker holds open while it runs: telemetry,
// the runners' pool and the heartbeat's, NATS, and the hook dispatcher.
type connections struct {
	tel           *telemetry.Telemetry
	pool          *pgxpool.Pool
	heartbeatPool *pgxpool.Pool
	nc            *nats.Conn
	hooks         *hooks.Dispatcher
	closers       []func() // in the order opened
}

// connect opens the worker's connections, closing what it opened when one
// fails. They outlive ctx (all but telemetry's start): the drain uses them.
func connect(ctx context.Context, cfg *Config, log *slog.Logger) (*connections, error) {
	c := &connections{}
	if err := c.open(ctx, cfg, log); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *connections) open(ctx context.Context, cfg *Config, log *slog.Logger) error {
	tel, stopTelemetry, err := telemetry.StartService(ctx, name, cfg.Embedded.Hosted(), log)
	if err != nil {
		return err
	}
	c.tel = tel
	c.closers = append(c.closers, stopTelemetry)
	base := context.WithoutCancel(ctx)
	c.pool, err = dbpool.New(base, cfg.DatabaseURL, cfg.DB, dbpool.Options{
		DefaultMaxConns: DefaultDBMaxConns(cfg.MaxRootChats, cfg.MaxSubagentChats), ApplicationName: "chatd-worker",
		Tracer: cfg.Embedded.DBTracer, MeterProvider: tel.MeterProvider,
	})
	if err != nil {
		return err
	}
	c.closers = append(c.closers, c.pool.Close)
	// Stored credentials under a key this worker lacks would fail every
	// model call and MCP connection that needs them: refuse to start.
	if err := secrets.CheckKeys(base, queries.New(c.pool), cfg.Secrets); err != nil {
		return err
	}
	c.heartbeatPool, err = dbpool.New(base, cfg.DatabaseURL, cfg.DB, dbpool.Options{
		MaxConns: heartbeatConns, MinConns: heartbeatConns, ApplicationName: "chatd-worker-heartbeat",
		Tracer: cfg.Embedded.DBTracer, MeterProvider: tel.MeterProvider,
	})
	if err != nil {
		return err
	}
	c.closers = append(c.closers, c.heartbeatPool.Close)
	c.nc, err = notify.Connect(cfg.NATSURL, "chatd-worker")
	if err != nil {
		return err
	}
	c.closers = append(c.closers, c.nc.Close)
	c.hooks, err = hooks.New(cfg.Hooks, hooks.WithLogger(log), hooks.WithMeter(tel.MeterProvider.Meter("github.com/chatd/chatd/pkg/hooks")))
	return err
}

// close closes the connections, the last opened first.
func (c *connections) close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
}

// worker is the service's components over its connections: the state
// machine, the message part buffer, the MCP tools, the runner manager and
// the acquisition loop.
type worker struct {
	clock    clockwork.Clock
	machine  *chatstate.Machine
	parts    *partbuf.Buffer
	mcpTools *mcptools.Provider
	mgr      *manager.Manager
	loop     *acquire.Loop
}

// build wires the worker's components; close releases the part buffer and
// the MCP sessions.
func build(c *connections, cfg *Config, workerID uuid.UUID, advertise string, log *slog.Logger) *worker {
	w := &worker{clock: clockwork.NewRealClock()}
	w.machine = chatstate.New(c.pool, chatstate.Config{AfterCommit: notify.NewPublisher(c.nc, log).AfterCommit, OwnerLease: cfg.Lease(), History: historyCache(cfg.HistoryCacheMB)})
	w.parts = partbuf.New(partbuf.Options{Clock: w.clock})
	// MCP sessions are cached per worker and closed when it stops.
	w.mcpTools = mcptools.New(c.pool, mcptools.Options{Log: log, Keys: cfg.Secrets, CallTimeout: cfg.ToolTimeout})

	w.mgr = manager.New(c.pool, runner.Deps{
		Pool: c.pool, Machine: w.machine, NATS: c.nc, Parts: w.parts, Clock: w.clock, Log: log, Secrets: cfg.Secrets,
		ToolProviders:   append(agentTools(c.pool, w.machine, c.nc, w.clock, log, c.hooks, cfg.Secrets), w.mcpTools),
		ToolHooks:       hookadapter.Tools{D: c.hooks},
		CompactionHooks: hookadapter.Compaction{D: c.hooks},
		StopHooks:       hookadapter.Stop{D: c.hooks},
		TracerProvider:  c.tel.TracerProvider,
		MeterProvider:   c.tel.MeterProvider,
		Experiments:     cfg.Hooks.Experiments, // chat-stage-metrics gates the stage metrics
		Config:          cfg.RunnerConfig(),
		Prompts:         promptCache(cfg.PromptCacheMB),
	}, manager.Config{
		WorkerID:      workerID,
		Lease:         cfg.Lease(),
		HeartbeatPool: c.heartbeatPool,
		PartsAddr:     advertise,
		OnExit:        func(k manager.Key) { w.loop.Released(k.ChatID) },
		Clock:         w.clock,
		Log:           log,
	})
	w.loop = acquire.New(c.pool, w.machine, c.nc, w.mgr, acquire.Config{
		WorkerID: workerID,
		Lease:    cfg.Lease(),
		Interval: cfg.AcquireInterval,
		Limits:   acquire.Limits{MaxRootChats: cfg.MaxRootChats, MaxSubagentChats: cfg.MaxSubagentChats},
		Clock:    w.clock,
		Log:      log,
		// chatd_acquisitions_total, chatd_acquisition_pass_duration_seconds
		MeterProvider: c.tel.MeterProvider,
	})
	return w
}

func (w *worker) close() {
	w.mcpTools.Close()
	w.parts.Close()
}

// loops are the worker's runner manager and acquisition loop, running.
type loops struct {
	stopMgr, stopAcq context.CancelFunc
	mgrDone, acqDone chan error
}

// start runs the runner manager and the acquisition loop on ctx until they
// are stopped.
func (w *worker) start(ctx context.Context, log *slog.Logger) *loops {
	l := &loops{mgrDone: make(chan error, 1), acqDone: make(chan error, 1)}
	var mgrCtx, acqCtx context.Context
	mgrCtx, l.stopMgr = context.WithCancel(ctx)
	go func() { l.mgrDone <- w.mgr.Run(mgrCtx) }()
	acqCtx, l.stopAcq = context.WithCancel(ctx)
	go func() {
		err := w.loop.Run(acqCtx)
		if err != nil {
			log.Error("acquisition loop stopped", "error", err.Error())
		}
		l.acqDone <- err
	}()
	return l
}

// cancel stops both loops without waiting for them.
func (l *loops) cancel() {
	l.stopAcq()
	l.stopMgr()
}

// stopAcquiring stops the acquisition loop and waits for it.
func (l *loops) stopAcquiring() {
	l.stopAcq()
	<-l.acqDone
}

// stopManager stops the runner manager and waits for it.
func (l *loops) stopManager(log *slog.Logger) {
	l.stopMgr()
	if err := <-l.mgrDone; err != nil {
		log.Error("runner manager", "error", err.Error())
	}
}

// drain waits for a SIGTERM (ctx) or for serving to end (serveCtx), stops
// acquiring, lets running turns finish for up to drainFor, releases the
// chats still running and unregisters the worker.
func (w *worker) drain(ctx, serveCtx context.Context, drainFor time.Duration, l *loops, log *slog.Logger) error {
	base := context.WithoutCancel(ctx)
	// A SIGTERM lets running turns finish; a server that failed on its
	// own releases its chats at once.
	select {
	case <-ctx.Done():
	case <-serveCtx.Done():
		drainFor = 0
	}
	l.stopAcquiring()
	log.Info("draining", "runners", len(w.mgr.Runners()))
	released, err := w.mgr.Drain(base, w.machine, drainFor, func() { l.stopManager(log) })
	log.Info("drained", "released_chats", len(released))
	if len(released) > 0 {
		// Released chats freed limiter slots: every other replica runs a
		// pass now, not at its next tick.
		w.loop.SlotsFreed()
	}
	uctx, cancel := context.WithTimeout(base, stopTimeout)
	defer cancel()
	return errors.Join(err, w.mgr.Unregister(uctx))
}

// serve serves PartsService and the metrics until ctx ends.
func serve(ctx context.Context, cfg *Config, tel *telemetry.Telemetry, parts *partbuf.Buffer, log *slog.Logger) error {
	// PartsService is internal (relays dial it on the advertised address);
	// it keeps streaming through the drain and closes with serving.
	partsSrv := partsrpc.New(parts, partsrpc.Options{Logger: log})
	context.AfterFunc(ctx, partsSrv.Close)
	return service.Run(ctx, service.Options{
		Name:            name,
		GRPCAddr:        cfg.GRPCAddr,
		GRPCListener:    cfg.Embedded.GRPCListener,
		MetricsAddr:     cfg.MetricsAddr,
		MetricsHandler:  tel.Handler,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Logger:          log,
		Register: func(s grpc.ServiceRegistrar, _ *http.ServeMux) error {
			partsSrv.Register(s)
			return nil
		},
	})
}
