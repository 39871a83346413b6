package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
)

// TestFaultsUnderLoad: the four services as processes with two workers,
// many multi-turn chats driven over REST, and the faults an operator sees,
// one after another while the load runs: NATS stopped for 5 s and started
// again, Postgres stopped for 3 s and started again, a worker killed with
// SIGKILL. At the end every chat is waiting and every accepted message is
// in its history exactly once, followed by exactly one complete answer.
//
// The test owns its Postgres (a private cluster, restarted in place) and
// its NATS (an in-process server stopped and started on the same port), so
// it disturbs no other test.
func TestFaultsUnderLoad(t *testing.T) {
	t.Parallel()
	const chats = 16
	s := stacktest.StartWith(t, stacktest.Options{Streams: 1, Workers: 2, Private: &stacktest.Private{},
		// The shortest lease the worker accepts and a quick acquisition
		// pass: the survivor takes the killed worker's chats within
		// seconds.
		WorkerEnv: []string{"CHATD_LEASE_SECONDS=10", "CHATD_ACQUIRE_INTERVAL=250ms"}})
	c := &faultClient{base: "http://" + s.APIHTTP, token: s.Token}

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	ids := make([]string, chats)
	for i := range ids {
		var chat struct {
			ID string `json:"id"`
		}
		c.do(ctx, t, "POST", "/api/v2/chats", fmt.Sprintf(`{"request_id":"create-%d"}`, i), &chat)
		require.NotEmpty(t, chat.ID)
		ids[i] = chat.ID
	}

	// Each chat sends its turns one after another, until the faults are
	// over: a message (with a request_id, so a retry after an ambiguous
	// failure is a replay), then waits until the chat is waiting with the
	// answer committed.
	var done atomic.Int64 // turns finished, over all chats
	var stop atomic.Bool  // no new turns
	turns := make([]int, chats)
	var outage struct {
		sync.Mutex
		sentDuring []time.Duration // send → finish, for turns sent while NATS was down
		down       bool
	}
	var wg sync.WaitGroup
	errs := make(chan error, chats)
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for turn := 1; !stop.Load(); turn++ {
				outage.Lock()
				duringOutage := outage.down
				outage.Unlock()
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
				if duringOutage {
					outage.Lock()
					outage.sentDuring = append(outage.sentDuring, time.Since(sent))
					outage.Unlock()
				}
				turns[i] = turn // read after wg.Wait
				done.Add(1)
			}
		}()
	}

	// The faults, each once the load has made progress past the last.
	began := time.Now()
	phase := func(what string) {
		t.Logf("%6.1fs %s (%d turns finished)", time.Since(began).Seconds(), what, done.Load())
	}
	waitProgress := func(n int64, what string) {
		t.Helper()
		for done.Load() < n {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: only %d of %d turns finished\n%s", what, done.Load(), n, s.Stderr())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	pause := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	waitProgress(chats, "before the NATS outage")
	outage.Lock()
	outage.down = true
	outage.Unlock()
	phase("NATS stops")
	s.Backends.NATS.Stop()
	pause(5 * time.Second)
	atOutageEnd := done.Load()
	s.Backends.NATS.Start()
	phase("NATS starts")
	natsBack := time.Now()
	outage.Lock()
	outage.down = false
	outage.Unlock()
	waitProgress(atOutageEnd+chats, "after NATS returned")
	sinceNATS := time.Since(natsBack)

	phase("Postgres stops")
	require.NoError(t, s.Backends.Primary.Stop())
	pause(3 * time.Second)
	require.NoError(t, s.Backends.Primary.Start())
	phase("Postgres starts")
	pgBack := time.Now()
	waitProgress(done.Load()+chats/2, "after Postgres returned")
	sincePG := time.Since(pgBack)

	phase("worker 0 killed")
	s.Workers[0].Kill(t)
	waitProgress(done.Load()+chats, "after a worker was killed")
	stop.Store(true)
	wg.Wait()
	phase("every turn finished")
	close(errs)
	for err := range errs {
		t.Errorf("%v", err)
	}
	if t.Failed() {
		t.FailNow()
	}
	outage.Lock()
	t.Logf("NATS back → %d more turns finished: %s; sent during the outage → finished: %v; Postgres back → %d turns: %s",
		chats, sinceNATS.Round(time.Millisecond), outage.sentDuring, chats/2, sincePG.Round(time.Millisecond))
	outage.Unlock()

	// Every chat: waiting, and each message once with one complete answer.
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
					Type string `json:"type"`
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

// faultClient calls the REST API and retries what a fault can fail: a
// refused connection, a 5xx, a 429. A 4xx other than 429 is an answer.
type faultClient struct {
	base, token string
	// observe, when set, sees every answer's status and headers (the
	// failover test's ledger).
	observe func(method, path string, status int, header http.Header)
}

// try sends the request until it is answered with a 2xx (decoding the body
// into out when set), a 4xx other than 429 (an error), or ctx ends.
func (c *faultClient) try(ctx context.Context, method, path, body string, out any) error {
	var last string
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		status, raw, err := c.once(ctx, method, path, body)
		switch {
		case err == nil && status/100 == 2:
			if out == nil {
				return nil
			}
			return json.Unmarshal(raw, out)
		case err == nil && status/100 == 4 && status != http.StatusTooManyRequests:
			return fmt.Errorf("%s %s: %d %s", method, path, status, raw)
		case err != nil:
			last = err.Error()
		default:
			last = fmt.Sprintf("%d %s", status, raw)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %s: gave up (last: %s)", method, path, last)
		case <-time.After(delay):
		}
	}
}

func (c *faultClient) once(ctx context.Context, method, path, body string) (int, []byte, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(rctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if c.observe != nil {
		c.observe(method, path, resp.StatusCode, resp.Header)
	}
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// do is try for the test goroutine: a failure ends the test.
func (c *faultClient) do(ctx context.Context, t *testing.T, method, path, body string, out any) {
	t.Helper()
	require.NoError(t, c.try(ctx, method, path, body, out))
}

// waitAnswered polls the chat until it is waiting with at least n messages.
func (c *faultClient) waitAnswered(ctx context.Context, id string, n int) error {
	for {
		var chat struct {
			Status string `json:"status"`
		}
		if err := c.try(ctx, "GET", "/api/v2/chats/"+id, "", &chat); err != nil {
			return err
		}
		if chat.Status == "waiting" || chat.Status == "error" {
			var list struct {
				Messages []json.RawMessage `json:"messages"`
			}
			if err := c.try(ctx, "GET", "/api/v2/chats/"+id+"/messages", "", &list); err != nil {
				return err
			}
			if chat.Status == "error" {
				return fmt.Errorf("the chat is in error after %d messages", len(list.Messages))
			}
			if len(list.Messages) >= n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not answered (status %s): %w", chat.Status, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
