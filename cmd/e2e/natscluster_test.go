package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
)

// TestNATSNodeLostUnderLoad: the four services (two workers) on a 3-node
// NATS cluster given as a URL list; chats take turns and one node is shut
// down mid-load. Every turn completes and every history is whole: NATS
// carries hints, and a wakeup lost with the node costs at most a poll.
// The time turns take before the loss and right after it is logged.
func TestNATSNodeLostUnderLoad(t *testing.T) {
	t.Parallel()
	const chats = 12
	s := stacktest.StartWith(t, stacktest.Options{Streams: 1, Workers: 2, Private: &stacktest.Private{NATSNodes: 3},
		WorkerEnv: []string{"CHATD_MAX_ROOT_CHATS=0"}})
	c := &faultClient{base: "http://" + s.APIHTTP, token: s.Token}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ids := make([]string, chats)
	for i := range ids {
		var chat struct {
			ID string `json:"id"`
		}
		c.do(ctx, t, "POST", "/api/v2/chats", fmt.Sprintf(`{"request_id":"create-%d"}`, i), &chat)
		ids[i] = chat.ID
	}

	type timedTurn struct {
		sent time.Time
		took time.Duration
	}
	var mu sync.Mutex
	var timed []timedTurn
	var done atomic.Int64
	var stop atomic.Bool
	turns := make([]int, chats)
	var wg sync.WaitGroup
	errs := make(chan error, chats)
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for turn := 1; !stop.Load(); turn++ {
				sent := time.Now()
				body := fmt.Sprintf(`{"request_id":"m%d-%d","content":[{"type":"text","text":"m%d-%d\n::stream 8 40"}]}`, i, turn, i, turn)
				if err := c.try(ctx, "POST", "/api/v2/chats/"+id+"/messages", body, nil); err != nil {
					errs <- fmt.Errorf("chat %d turn %d: send: %w", i, turn, err)
					return
				}
				if err := c.waitAnswered(ctx, id, 2*turn); err != nil {
					errs <- fmt.Errorf("chat %d turn %d: %w", i, turn, err)
					return
				}
				mu.Lock()
				timed = append(timed, timedTurn{sent: sent, took: time.Since(sent)})
				mu.Unlock()
				turns[i] = turn // read after wg.Wait
				done.Add(1)
			}
		}()
	}
	waitTurns := func(n int64, what string) {
		t.Helper()
		for done.Load() < n {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: only %d of %d turns finished\n%s", what, done.Load(), n, s.Stderr())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	waitTurns(2*chats, "before the node loss")
	lost := time.Now()
	s.Backends.NATSCluster.Servers[0].Shutdown()
	waitTurns(done.Load()+3*chats, "after the node loss")
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("%v", err)
	}
	if t.Failed() {
		t.FailNow()
	}
	checkHistories(ctx, t, c, ids, turns)

	// Turns sent up to 5 s before the loss, and those in flight at it or
	// sent within 5 s after it.
	var before, after []time.Duration
	for _, tt := range timed {
		switch {
		case tt.sent.Before(lost) && tt.sent.Add(tt.took).Before(lost) && lost.Sub(tt.sent) < 5*time.Second:
			before = append(before, tt.took)
		case tt.sent.Add(tt.took).After(lost) && tt.sent.Sub(lost) < 5*time.Second:
			after = append(after, tt.took)
		}
	}
	require.NotEmpty(t, before)
	require.NotEmpty(t, after)
	slices.Sort(before)
	slices.Sort(after)
	t.Logf("turn time (send → answered) before the node loss: p50 %s max %s (%d turns); at and after it: p50 %s max %s (%d turns)",
		before[len(before)/2].Round(time.Millisecond), before[len(before)-1].Round(time.Millisecond), len(before),
		after[len(after)/2].Round(time.Millisecond), after[len(after)-1].Round(time.Millisecond), len(after))
}
