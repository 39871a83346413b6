package workerserver

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
)

// BenchmarkSendToAcquire measures what a POST message costs until a worker
// owns the chat: the SendMessage bundle commits and publishes (as the api
// does), the worker wakes on chat:ownership, and its Acquire commits (seen
// as the chat:update carrying a worker_id). One send at a time, each to an
// idle worker (the previous turn finishes untimed); reports p50 and p99.
func BenchmarkSendToAcquire(b *testing.B) {
	e := newE2E(b)
	ctx, m, nc := e.ctx, e.m, natstest.Connect(b, e.natsURL)
	ids := make([]uuid.UUID, b.N)
	for i := range ids {
		ids[i] = uuid.New()
		if _, err := m.Create(ctx, chatstate.CreateParams{ID: ids[i], OrganizationID: e.org, OwnerID: e.user, Title: "t"}); err != nil {
			b.Fatal(err)
		}
	}
	startWorker(b, e.dbURL, e.natsURL)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for _, id := range ids {
		owned := make(chan struct{}, 1)
		sub, err := notify.SubscribeUpdates(nc, id, func(n *chatdv1.ChatUpdateNotification) {
			if n.WorkerId != nil {
				select {
				case owned <- struct{}{}:
				default:
				}
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := m.Update(ctx, id, func(tx *chatstate.Tx) error {
			_, err := tx.SendMessage(ctx, chatstate.UserMessage(chatmsg.Content{chatmsg.Text("::reply ok")}), chatstate.BusyQueue)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		select {
		case <-owned:
		case <-time.After(30 * time.Second):
			b.Fatal("no worker acquired the chat within 30s")
		}
		lat = append(lat, time.Since(start))
		_ = sub.Unsubscribe()
		// Untimed: let the turn finish and the runner release the chat, so
		// each send meets an idle worker rather than the last turn's work.
		b.StopTimer()
		for {
			s, err := m.Get(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			if s.Chat.Status == chatstate.StatusWaiting && s.Chat.WorkerID == nil {
				break
			}
			time.Sleep(time.Millisecond) // polling the database between samples
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
