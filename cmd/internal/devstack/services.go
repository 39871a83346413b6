package devstack

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/chatd/chatd/pkg/outbound"
	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/services/api/apiserver"
	"github.com/chatd/chatd/services/relay/relayserver"
	"github.com/chatd/chatd/services/stream/streamserver"
	"github.com/chatd/chatd/services/worker/workerserver"
)

// Names of the services on the in-memory network.
const (
	apiGRPC    = "api-grpc"
	apiHTTP    = "api-http"
	workerGRPC = "worker-grpc"
	relayGRPC  = "relay-grpc"
	streamGRPC = "stream-grpc"
	streamHTTP = "stream-http"
)

// settings is the environment the services parse their CHATD_* settings
// from: the stack's fixed values (database, NATS, auth secret), then the
// developer's environment, then the dev defaults below.
type settings struct {
	getenv func(string) string
	fixed  map[string]string
}

// devDefaults differ from the production defaults where a one-process
// stack on a laptop wants it: a Ctrl-C should not wait for a drain that
// has no other worker to hand chats to.
var devDefaults = map[string]string{
	"CHATD_DRAIN_SECONDS": "1",
}

// unusedAddrs are required settings the hosted services never bind: each
// is given in-memory listeners instead, and the stack's one port is
// Config.HTTPAddr (chatd dev reads CHATD_HTTP_ADDR into it).
var unusedAddrs = map[string]string{
	"CHATD_GRPC_ADDR": "127.0.0.1:0",
	"CHATD_HTTP_ADDR": "127.0.0.1:0",
}

func (s settings) lookup(key string) (string, bool) {
	if v, ok := s.fixed[key]; ok {
		return v, true
	}
	if v, ok := unusedAddrs[key]; ok {
		return v, true
	}
	if v := s.getenv(key); v != "" {
		return v, true
	}
	v, ok := devDefaults[key]
	return v, ok
}

// hosted is one service of the stack.
type hosted struct {
	name string
	run  func(ctx context.Context, log *slog.Logger) error
}

// newServices parses each service's settings and wires it to the
// in-memory network.
func newServices(env settings, network *service.InProcess) ([]hosted, error) {
	api, worker, relay, stream := apiserver.Program(), workerserver.Program(), relayserver.Program(), streamserver.Program()
	for _, p := range []service.Program{api, worker, relay, stream} {
		vars := service.NewVars("chatd dev ("+p.Name+")", p.Summary)
		p.Config.Declare(vars)
		if err := vars.Parse(nil, env.lookup); err != nil {
			return nil, fmt.Errorf("%s settings: %w", p.Name, err)
		}
	}
	apiCfg := api.Config.(*apiserver.Config)
	// One developer's stack: no per-user request rate unless it is set, so
	// `chatd bench --dev` measures the stack rather than the limit.
	if _, set := env.lookup("CHATD_RATE_LIMIT_PER_SECOND"); !set {
		apiCfg.RateLimitPerSecond = 0
	}
	// service.Main applies the outbound policy to a service's process; the
	// stack's services share this one.
	outbound.SetDenyPrivate(apiCfg.OutboundDenyPrivate)
	apiCfg.Embedded = service.Embedded{GRPCListener: network.Listen(apiGRPC), HTTPListener: network.Listen(apiHTTP),
		DialOptions: network.DialOptions()}
	// The /v1 streams take live parts from the relay too.
	apiCfg.RelayAddr = network.Addr(relayGRPC)

	workerCfg := worker.Config.(*workerserver.Config)
	workerCfg.Embedded = service.Embedded{GRPCListener: network.Listen(workerGRPC)}
	// Relays find the worker in the registry by this address and reach it
	// over the in-memory network.
	workerCfg.AdvertiseAddr = network.Addr(workerGRPC)

	relayCfg := relay.Config.(*relayserver.Config)
	relayCfg.Embedded = service.Embedded{GRPCListener: network.Listen(relayGRPC), DialOptions: network.DialOptions()}

	streamCfg := stream.Config.(*streamserver.Config)
	streamCfg.Embedded = service.Embedded{
		GRPCListener: network.Listen(streamGRPC), HTTPListener: network.Listen(streamHTTP),
		DialOptions: network.DialOptions(),
	}
	streamCfg.RelayAddr = network.Addr(relayGRPC)

	var out []hosted
	for _, p := range []service.Program{api, worker, relay, stream} {
		out = append(out, hosted{name: p.Name, run: p.Run})
	}
	return out, nil
}

// logLevel is the level of the stack's log: CHATD_LOG_LEVEL, default info.
func logLevel(getenv func(string) string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(getenv("CHATD_LOG_LEVEL"))); err != nil {
		return slog.LevelInfo
	}
	return l
}

// NewLoggerTo is the stack's logger: text on w at CHATD_LOG_LEVEL.
func NewLoggerTo(w io.Writer, getenv func(string) string) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: logLevel(getenv)}))
}
