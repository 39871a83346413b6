package mcptools

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/chatd/chatd/pkg/telemetry"
)

// The mcp_connect stage's attributes: how many servers connected and how
// many failed to.
const (
	AttrServersConnected = "mcp_servers_connected"
	AttrServersFailed    = "mcp_servers_failed"
)

// connectTally counts the connect attempts of one Tools call, for its
// mcp_connect stage.
type connectTally struct{ ok, failed atomic.Int64 }

type tallyKey struct{}

// connectStage is the mcp_connect stage of one Tools call (spec "Stages":
// connecting to the configured MCP servers, inside prepare). It starts
// when the listing starts and is emitted at end only when the call
// connected to, or failed to connect to, at least one server: listing
// through cached sessions is no connecting. It carries the number of
// servers that connected and that failed, and is errored only when none
// connected. The runner's tracer and identity come from ctx
// (telemetry.ContextWithStages); without one nothing is recorded.
type connectStage struct {
	ctx    context.Context
	stages *telemetry.Stages
	start  time.Time
	tally  *connectTally
}

// startConnects returns ctx carrying the tally connect reports to.
func startConnects(ctx context.Context) (context.Context, *connectStage) {
	s := telemetry.StagesFromContext(ctx)
	cs := &connectStage{ctx: ctx, stages: s, start: s.Now(), tally: &connectTally{}}
	return context.WithValue(ctx, tallyKey{}, cs.tally), cs
}

// end emits the stage if any connect was attempted.
func (cs *connectStage) end() {
	ok, failed := cs.tally.ok.Load(), cs.tally.failed.Load()
	if ok+failed == 0 {
		return
	}
	emitConnect(cs.ctx, cs.stages, cs.start, ok, failed)
}

func emitConnect(ctx context.Context, s *telemetry.Stages, start time.Time, ok, failed int64) {
	_, st := s.Start(ctx, telemetry.StageMCPConnect, telemetry.At(start), telemetry.WithAttributes(
		attribute.Int64(AttrServersConnected, ok), attribute.Int64(AttrServersFailed, failed)))
	var err error
	if ok == 0 {
		err = errors.New(fmt.Sprint("no MCP server connected (", failed, " failed)"))
	}
	st.EndAt(s.Now(), err)
}

// reportConnect records one connect attempt that began at start: into
// the Tools call's tally, or, for a reconnect outside a listing (a tool
// call whose session was gone), as its own mcp_connect stage nested in
// the tool_call.
func reportConnect(ctx context.Context, start time.Time, err error) {
	var ok, failed int64 = 1, 0
	if err != nil {
		ok, failed = 0, 1
	}
	if t, _ := ctx.Value(tallyKey{}).(*connectTally); t != nil {
		t.ok.Add(ok)
		t.failed.Add(failed)
		return
	}
	if s := telemetry.StagesFromContext(ctx); s != nil {
		emitConnect(ctx, s, start, ok, failed)
	}
}

// connectStart is when a connect attempt began on the stages' clock.
func connectStart(ctx context.Context) time.Time {
	return telemetry.StagesFromContext(ctx).Now()
}
