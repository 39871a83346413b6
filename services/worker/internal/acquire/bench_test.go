package acquire_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"google.golang.org/protobuf/proto"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbtest"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/services/worker/internal/acquire"
	"github.com/chatd/chatd/services/worker/internal/manager/managertest"
	"github.com/chatd/chatd/services/worker/internal/runner"
)

// BenchmarkOwnershipToAcquire measures a runnable chat's chat:ownership
// notification to its Acquire committed and the runner spawn requested,
// with the default limits; it reports p50 and p99.
func BenchmarkOwnershipToAcquire(b *testing.B) {
	pool := dbtest.NewPool(b)
	url := natstest.URL(b)
	nc := natstest.Connect(b, url)
	tn := managertest.NewTenant(b, pool)
	ids := tn.Chats(b, pool, b.N, "waiting", nil)
	m := chatstate.New(pool, chatstate.Config{AfterCommit: notify.NewPublisher(nc, nil).AfterCommit})
	spawned := make(chan uuid.UUID, 1)
	loop := acquire.New(pool, m, natstest.Connect(b, url),
		spawnFunc(func(s runner.Spec) error { spawned <- s.ChatID; return nil }),
		acquire.Config{
			WorkerID: uuid.New(), Lease: lease, Clock: clockwork.NewFakeClock(),
			Limits: acquire.Limits{MaxRootChats: acquire.DefaultMaxRootChats, MaxSubagentChats: acquire.DefaultMaxSubagentChats},
		})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = loop.Run(ctx) }()
	// Each acquired chat goes back to waiting so the pools stay empty.
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for _, id := range ids {
		if _, err := pool.Exec(ctx, `UPDATE chats SET status = 'running' WHERE id = $1`, id); err != nil {
			b.Fatal(err)
		}
		data, _ := proto.Marshal(&chatdv1.OwnershipNotification{ChatId: id.String(), SnapshotVersion: 2})
		start := time.Now()
		if err := nc.Publish(notify.OwnershipSubject, data); err != nil {
			b.Fatal(err)
		}
		if got := <-spawned; got != id {
			b.Fatalf("spawned %s, want %s", got, id)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		if _, err := pool.Exec(ctx, `UPDATE chats SET status = 'waiting', worker_id = NULL, runner_id = NULL WHERE id = $1`, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
