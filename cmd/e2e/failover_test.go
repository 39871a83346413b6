package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/cmd/internal/strictllm"
)

// TestFailoverUnderLoad: a primary and a synchronous standby, the four
// services (two workers) on one multi-host URL with
// target_session_attrs=read-write, chats taking turns; the primary is
// killed as its host would crash and the standby promoted a second later.
// A ledger records every acknowledged send: at the end each is in its
// chat's history exactly once with one complete answer, every chat is
// waiting, and no answer during the outage was a 5xx other than 503 with
// Retry-After. The time from the promotion to the first acknowledged write
// is logged.
func TestFailoverUnderLoad(t *testing.T) {
	t.Parallel()
	const chats = 30
	model := startEchoModel(t)
	s := stacktest.StartWith(t, stacktest.Options{Streams: 1, Workers: 2, Private: &stacktest.Private{SyncStandby: true},
		WorkerEnv: failoverWorkerEnv()})
	cfgID := useModel(t, s, model.URL)

	var ledger failoverLedger
	c := &faultClient{base: "http://" + s.APIHTTP, token: s.Token, observe: ledger.observe}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	ids := make([]string, chats)
	for i := range ids {
		var chat struct {
			ID string `json:"id"`
		}
		// Titled: no title call adds to the model's calls.
		c.do(ctx, t, "POST", "/api/v2/chats", fmt.Sprintf(`{"request_id":"create-%d","title":"chat %d","model_config_id":%q}`, i, i, cfgID), &chat)
		ids[i] = chat.ID
	}

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
				body := fmt.Sprintf(`{"request_id":"m%d-%d","model_config_id":%q,"content":[{"type":"text","text":"m%d-%d"}]}`, i, turn, cfgID, i, turn)
				if err := c.try(ctx, "POST", "/api/v2/chats/"+id+"/messages", body, nil); err != nil {
					errs <- fmt.Errorf("chat %d turn %d: send: %w", i, turn, err)
					return
				}
				ledger.acked(time.Now())
				if err := c.waitAnswered(ctx, id, 2*turn); err != nil {
					errs <- fmt.Errorf("chat %d turn %d: %w", i, turn, err)
					return
				}
				ledger.answered(time.Now())
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
				t.Fatalf("%s: only %d of %d turns finished\n%s\n%s", what, done.Load(), n, ownership(t, s.DatabaseURL, ids), s.Stderr())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	waitTurns(chats, "before the failover")

	killed := time.Now()
	require.NoError(t, s.Backends.Primary.Kill())
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
	require.NoError(t, s.Backends.Standby.Promote())
	promoted := time.Now()
	ledger.setPromoted(promoted)
	waitTurns(done.Load()+chats, "after the promotion")
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("%v", err)
	}
	if t.Failed() {
		t.FailNow()
	}

	firstWrite, firstTurn, statuses := ledger.report()
	require.False(t, firstWrite.IsZero(), "no write was acknowledged after the promotion")
	t.Logf("primary killed → promoted: %s; promotion → first acknowledged write: %s, → first turn answered: %s; answers: %v",
		promoted.Sub(killed).Round(time.Millisecond), firstWrite.Sub(promoted).Round(time.Millisecond),
		firstTurn.Sub(promoted).Round(time.Millisecond), statuses)
	for status := range statuses {
		require.False(t, status >= 500 && status != http.StatusServiceUnavailable, "a %d answer: the api answers 503 during a failover", status)
	}
	require.Zero(t, ledger.without503RetryAfter.Load(), "every 503 carries Retry-After")
	checkHistories(ctx, t, c, ids, turns)
	// Both workers survived the failover, and so did their leases: no
	// chat was taken over, so no turn's model call was made twice.
	calls := map[string]int{}
	for _, e := range model.Exchanges() {
		calls[echoMarker(e.Request)]++
	}
	var twice []string
	for i := range ids {
		for turn := 1; turn <= turns[i]; turn++ {
			m := fmt.Sprintf("m%d-%d", i, turn)
			require.NotZero(t, calls[m], "turn %s answered without a model call", m)
			if calls[m] > 1 {
				twice = append(twice, fmt.Sprintf("%s ×%d", m, calls[m]))
			}
		}
	}
	require.Empty(t, twice, "turns whose model was called again after the failover (%d turns in all)", done.Load())
}

// startEchoModel is a provider double that answers each prompt as the
// fault tests' histories expect ("echo: <prompt>" and eight tokens),
// streamed 40 ms apart.
func startEchoModel(t *testing.T) *strictllm.Server {
	t.Helper()
	return strictllm.Start(t, func(_ int, req strictllm.Request) strictllm.Reply {
		pieces := []string{"echo: " + echoMarker(req) + "\n"}
		for i := 1; i <= 8; i++ {
			sep := " "
			if i == 1 {
				sep = ""
			}
			pieces = append(pieces, fmt.Sprintf("%stok%d", sep, i))
		}
		return strictllm.Reply{Pieces: pieces, Pace: 40 * time.Millisecond}
	})
}

var promptMarker = regexp.MustCompile(`m[0-9]+-[0-9]+`)

// echoMarker is the m<chat>-<turn> marker of the call's last prompt.
func echoMarker(req strictllm.Request) string {
	for j := len(req.Messages) - 1; j >= 0; j-- {
		if req.Messages[j].Role == "user" {
			raw, _ := json.Marshal(req.Messages[j].Content)
			return promptMarker.FindString(string(raw))
		}
	}
	return ""
}

// failoverLedger counts the api's answers by status and records the first
// acknowledged send after the promotion.
type failoverLedger struct {
	mu                   sync.Mutex
	statuses             map[int]int
	promoted, firstWrite time.Time
	// firstTurn is the first answer to a send acknowledged after the
	// promotion.
	firstTurn            time.Time
	without503RetryAfter atomic.Int64
}

func (l *failoverLedger) observe(_, _ string, status int, header http.Header) {
	if status == http.StatusServiceUnavailable && header.Get("Retry-After") == "" {
		l.without503RetryAfter.Add(1)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.statuses == nil {
		l.statuses = make(map[int]int)
	}
	l.statuses[status]++
}

func (l *failoverLedger) acked(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.promoted.IsZero() && l.firstWrite.IsZero() {
		l.firstWrite = at
	}
}

// answered records a turn answered; the first one sent after the
// promotion is the deployment working again end to end.
func (l *failoverLedger) answered(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.firstWrite.IsZero() && l.firstTurn.IsZero() {
		l.firstTurn = at
	}
}

func (l *failoverLedger) setPromoted(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.promoted = at
}

func (l *failoverLedger) report() (firstWrite, firstTurn time.Time, statuses map[int]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstWrite, l.firstTurn, l.statuses
}

// checkHistories requires every chat waiting, with each turn's message once
// followed by exactly one complete answer.
func checkHistories(ctx context.Context, t *testing.T, c *faultClient, ids []string, turns []int) {
	t.Helper()
	for i, id := range ids {
		var chat struct {
			Status string `json:"status"`
		}
		c.do(ctx, t, "GET", "/api/v2/chats/"+id, "", &chat)
		require.Equal(t, "waiting", chat.Status, "chat %d", i)
		var list struct {
			Messages []struct {
				Role    string `json:"role"`
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"messages"`
		}
		c.do(ctx, t, "GET", "/api/v2/chats/"+id+"/messages", "", &list)
		require.Len(t, list.Messages, 2*turns[i], "chat %d: a user message and an answer per turn", i)
		for turn := 1; turn <= turns[i]; turn++ {
			user, answer := list.Messages[2*turn-2], list.Messages[2*turn-1]
			marker := fmt.Sprintf("m%d-%d", i, turn)
			require.Equal(t, "user", user.Role)
			require.Contains(t, user.Content[0].Text, marker)
			require.Equal(t, "assistant", answer.Role, "chat %d turn %d", i, turn)
			var text strings.Builder
			for _, p := range answer.Content {
				text.WriteString(p.Text)
			}
			require.Equal(t, "echo: "+marker+"\ntok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8", text.String(), "chat %d turn %d", i, turn)
		}
	}
}

// failoverWorkerEnv is the workers' settings: the defaults, unless
// CHATD_TEST_FAILOVER_WORKER_ENV lists others (space-separated KEY=value),
// to compare leases and intervals.
func failoverWorkerEnv() []string {
	return strings.Fields(os.Getenv("CHATD_TEST_FAILOVER_WORKER_ENV"))
}
