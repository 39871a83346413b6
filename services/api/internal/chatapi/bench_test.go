package chatapi_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/chatstate"
)

// BenchmarkSendToNotification measures POST /messages → committed →
// chat:update published and received, from 16 concurrent clients, each on
// its own chat. Between sends a worker finishes the turn (untimed). Reports
// the p50 and p99 latency. CHATD_BENCH_REQUEST_IDS=1 gives each send a
// fresh request_id, as the web client's sends have.
func BenchmarkSendToNotification(b *testing.B) {
	withIDs := os.Getenv("CHATD_BENCH_REQUEST_IDS") == "1"
	clients := envClients()
	a := setup(b)
	ids := make([]uuid.UUID, clients)
	for i := range ids {
		ids[i] = a.createChat("hello")
		a.worker(ids[i], func(ctx context.Context, tx *chatstate.Tx) error { _, err := tx.FinishTurn(ctx); return err })
	}
	var next atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	b.ResetTimer()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := ids[c]
			notes := a.watch(id)
			// Notifications of the setup may still arrive: skip up to here.
			seen := a.snapshot(id).Chat.SnapshotVersion
			body := map[string]any{"content": textContent("ping")}
			path := "/api/v2/chats/" + id.String() + "/messages"
			for k := next.Add(1); k <= int64(b.N); k = next.Add(1) {
				if withIDs {
					body["request_id"] = fmt.Sprintf("bench-%d", k)
				}
				start := time.Now()
				r := a.call("POST", path, a.user.token, body)
				if r.code != http.StatusCreated {
					b.Errorf("send: %d %s", r.code, r.raw)
					return
				}
				n := notes.after(b, seen)
				if n.GetStatus() != "running" {
					b.Errorf("want the send's notification, got status %s", n.GetStatus())
					return
				}
				d := time.Since(start)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
				a.worker(id, func(ctx context.Context, tx *chatstate.Tx) error { _, err := tx.FinishTurn(ctx); return err })
				seen = notes.after(b, n.GetSnapshotVersion()).GetSnapshotVersion() // the turn's end
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// envClients is CHATD_BENCH_CLIENTS, default 16.
func envClients() int {
	if n, err := strconv.Atoi(os.Getenv("CHATD_BENCH_CLIENTS")); err == nil && n > 0 {
		return n
	}
	return 16
}
