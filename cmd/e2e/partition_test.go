package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/netns"
	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/cmd/internal/strictllm"
	"github.com/chatd/chatd/pkg/db/pgcluster"
)

// partitionLease is the workers' lease (CHATD_LEASE_SECONDS): the
// shortest the worker accepts, so that a takeover comes within seconds.
const partitionLease = 10 * time.Second

// TestWorkerCutOffFromPostgres: a worker streams three turns when its
// link to Postgres is dropped (NATS and the model stay reachable). Its
// heartbeat fails, and it stops its runners before their lease ends: the
// model double sees each of its calls end before the lease does (one of
// them completed just after the cut, so the worker holds a whole answer it
// cannot commit; the others are cancelled mid-stream). Once the lease
// has lapsed another worker takes every chat and answers it; the link
// then comes back while those answers stream. At the end each chat holds
// the other worker's answer only, and no write of the cut-off worker
// (its sessions come from its link address) landed on any of the chats
// after the takeover: what it still tried was fenced.
func TestWorkerCutOffFromPostgres(t *testing.T) {
	t.Parallel()
	const chats = 3
	f := setupPartition(t)
	defer func() {
		if t.Failed() {
			t.Logf("%s", f.Stderr())
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	ids := f.createChats(ctx, t, chats)
	firstTurns := make([]string, chats)
	for i := range firstTurns {
		firstTurns[i] = marker(i, 1)
	}
	cutOffIP := f.modelRemote(0)
	f.streaming(ctx, t, cutOffIP, firstTurns...)
	waitOwned(ctx, t, f.DatabaseURL, ids)
	owners := chatOwners(ctx, t, f.DatabaseURL, ids)
	hostWorker := f.StartWorker(t, stacktest.WorkerPlace{})
	leases := watchLeases(ctx, t, f.DatabaseURL, owners)

	cut := time.Now()
	f.pgLink.Cut(t)
	// Chat 0's model call completes at once: the worker holds an answer
	// it can no longer commit.
	f.release(0, 1)
	ended := f.ended(ctx, t, cutOffIP, firstTurns...)
	t.Logf("link cut; the cut-off worker's model calls ended %v after it", sinceEach(cut, ended))

	for i, id := range ids {
		for f.Owner(t, id) != hostWorker {
			select {
			case <-ctx.Done():
				t.Fatalf("chat %d was not taken over\n%s\n%s", i, ownership(t, f.DatabaseURL, ids), f.Stderr())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	taken := f.streaming(ctx, t, f.modelRemote(hostWorker), firstTurns...)
	restored := time.Now()
	f.pgLink.Restore(t)
	t.Logf("taken over %v after the cut; link restored %s after it", sinceEach(cut, taken), restored.Sub(cut).Round(time.Millisecond))
	for i, id := range ids {
		if err := f.client.waitAnswered(ctx, id, 2); err != nil {
			t.Fatalf("chat %d: %v\n%s", i, err, f.Stderr())
		}
	}
	// The cut-off worker is back: it has renewed its registration twice
	// since (a heartbeat interval apart), time enough for whatever it
	// still meant to write about these chats.
	waitRegistered(ctx, t, f.DatabaseURL, owners[ids[0]].worker, restored, 2)

	lastRenewal := leases()
	for i, id := range ids {
		m := marker(i, 1)
		leaseEnd := lastRenewal[id].Add(partitionLease)
		require.False(t, lastRenewal[id].IsZero(), "chat %d: no lease of the cut-off worker seen", i)
		require.True(t, ended[m].Ended.Before(leaseEnd),
			"chat %d: the cut-off worker's model call ended at %s, after its lease ended at %s", i, ended[m].Ended, leaseEnd)
		require.Equal(t, i == 0, ended[m].Completed, "chat %d: only chat 0's call was let finish", i)
		require.True(t, taken[m].Started.After(ended[m].Ended), "chat %d: the new owner called the model while the old one still did", i)

		msgs := f.messages(ctx, t, id)
		require.Len(t, msgs, 2, "chat %d: the prompt and one answer", i)
		require.Contains(t, msgs[1], "from "+f.modelRemote(hostWorker)+" for "+m, "chat %d: the answer is the new owner's", i)

		var takeover time.Time
		for _, w := range writes(ctx, t, f.backends.DirectURL, id) {
			if takeover.IsZero() && w.At.After(cut) && w.Client != f.pgLink.NS.String() && w.Table == "chat_heartbeats" && w.Op == "INSERT" {
				takeover = w.At
			}
			require.False(t, !takeover.IsZero() && w.Client == f.pgLink.NS.String(),
				"chat %d: a write of the cut-off worker landed after the takeover (%s): %+v", i, takeover, w)
		}
		require.False(t, takeover.IsZero(), "chat %d: no takeover recorded", i)
	}
	for _, e := range f.model.Exchanges() {
		require.False(t, e.Remote == cutOffIP && e.Started.After(cut), "the cut-off worker called the model after the cut: %+v", e)
	}
	require.Contains(t, f.Workers[0].Stderr(), "lease about to lapse without a heartbeat; stopping runner")
}

// TestWorkerCutOffFromNATS: a worker streams two turns when its link to
// NATS is dropped (Postgres and the model stay reachable). Nothing stops:
// its model calls run to their end, the turns are committed, and the next
// prompts, whose notifications it no longer hears, are found by its
// polling and answered. The time those turns took is logged.
func TestWorkerCutOffFromNATS(t *testing.T) {
	t.Parallel()
	const chats = 2
	f := setupPartition(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	ids := f.createChats(ctx, t, chats)
	cutOffIP := f.modelRemote(0)
	f.streaming(ctx, t, cutOffIP, marker(0, 1), marker(1, 1))
	waitOwned(ctx, t, f.DatabaseURL, ids)

	f.natsLink.Cut(t)
	defer f.natsLink.Restore(t)
	for i, id := range ids {
		f.release(i, 1)
		if err := f.client.waitAnswered(ctx, id, 2); err != nil {
			t.Fatalf("chat %d turn 1: %v\n%s", i, err, f.Stderr())
		}
	}
	var took []time.Duration
	for i, id := range ids {
		f.release(i, 2) // the second turn's call completes at once
		sent := time.Now()
		f.send(ctx, t, id, i, 2)
		if err := f.client.waitAnswered(ctx, id, 4); err != nil {
			t.Fatalf("chat %d turn 2: %v\n%s", i, err, f.Stderr())
		}
		took = append(took, time.Since(sent).Round(time.Millisecond))
	}
	t.Logf("turns sent while the worker hears no NATS: send → answered %v", took)

	for _, e := range f.model.Exchanges() {
		require.Equal(t, cutOffIP, e.Remote, "only the cut-off worker runs")
		require.True(t, e.Completed, "a model call was cut short: %+v", e)
	}
	require.Len(t, f.model.Exchanges(), 2*chats, "one model call per turn")
	for i, id := range ids {
		msgs := f.messages(ctx, t, id)
		require.Len(t, msgs, 4, "chat %d: two prompts and two answers", i)
		require.Contains(t, msgs[1], "for "+marker(i, 1), "chat %d", i)
		require.Contains(t, msgs[3], "for "+marker(i, 2), "chat %d", i)
	}
	stderr := f.Workers[0].Stderr()
	require.NotContains(t, stderr, "stopping runner", "the worker stopped a runner without NATS")
	require.NotContains(t, stderr, "lease not renewed", "a lease lapsed without NATS")
}

// partitionFixture is the stack of the partition tests: a worker ("the
// cut-off worker") in a network namespace of its own, which reaches
// Postgres, NATS and everything else (the model provider, the relay
// dialing it) over three veth links the test can drop one by one, and the
// api, relay, stream and any further worker on the host. The model is a
// provider double on the host side of the third link, which tells the
// cut-off worker's calls from the others' by their source address.
type partitionFixture struct {
	*stacktest.Stack
	backends         *stacktest.Backends
	pgLink, natsLink *netns.Link
	netLink          *netns.Link
	model            *strictllm.Server
	cfgID            string
	client           *faultClient
	mu               sync.Mutex
	holds            map[string]chan struct{} // by chat marker: the cut-off worker's streams wait on it
	hostPieces       int                      // how many pieces a host worker's answer streams, 100 ms apart
}

// setupPartition starts the fixture with the cut-off worker as the only
// worker, and a provider and model config pointing at the double.
func setupPartition(t *testing.T) *partitionFixture {
	t.Helper()
	ns := netns.New(t)
	f := &partitionFixture{pgLink: ns.Link(t), natsLink: ns.Link(t), holds: map[string]chan struct{}{}, hostPieces: 30}
	f.netLink = ns.Link(t)
	netLink := f.netLink
	f.backends = stacktest.StartPrivate(t, stacktest.Private{
		Postgres: pgcluster.Options{Networks: []netip.Prefix{f.pgLink.Prefix}},
		NATSHost: f.natsLink.Host.String(),
	})
	installWriteAudit(t, f.backends.DirectURL)

	cutOff := netLink.NS.String()
	f.model = strictllm.StartOn(t, netLink.Host.String()+":0", func(n int, req strictllm.Request) strictllm.Reply {
		marker := chatMarker(req)
		if req.Remote != cutOff {
			pieces := []string{fmt.Sprintf("reply %d from %s for %s:", n, req.Remote, marker)}
			for i := range f.hostPieces {
				pieces = append(pieces, fmt.Sprintf(" tok%d", i+1))
			}
			return strictllm.Reply{Pieces: pieces, Pace: 100 * time.Millisecond}
		}
		f.mu.Lock()
		hold := f.holds[marker]
		if hold == nil {
			hold = make(chan struct{})
			f.holds[marker] = hold
		}
		f.mu.Unlock()
		return strictllm.Reply{Pieces: []string{fmt.Sprintf("reply %d from %s for %s:", n, req.Remote, marker), " still", " generating"}, Pace: 100 * time.Millisecond, Hold: hold}
	})

	pgURL := fmt.Sprintf("postgres://postgres@%s:%d/chatd?sslmode=disable", f.pgLink.Host, f.backends.Primary.Port)
	f.Stack = stacktest.StartWith(t, stacktest.Options{
		Streams: 1, DatabaseURL: f.backends.DatabaseURL, NATSURL: f.backends.NATSURL,
		WorkerEnv: []string{fmt.Sprintf("CHATD_LEASE_SECONDS=%d", int(partitionLease.Seconds())), "CHATD_ACQUIRE_INTERVAL=250ms"},
		Places:    []stacktest.WorkerPlace{{Command: ns.Command(), Addr: netLink.NS.String() + ":7070", DatabaseURL: pgURL}},
	})
	f.cfgID = useModel(t, f.Stack, f.model.URL)
	f.client = &faultClient{base: "http://" + f.APIHTTP, token: f.Token}
	return f
}

// createChats creates n chats (titled, so no title call is made), each
// with a first prompt carrying its marker, and returns their IDs.
func (f *partitionFixture) createChats(ctx context.Context, t *testing.T, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		var chat struct {
			ID string `json:"id"`
		}
		body, err := json.Marshal(map[string]any{"title": fmt.Sprintf("chat %d", i), "model_config_id": f.cfgID,
			"content": []map[string]any{{"type": "text", "text": marker(i, 1)}}})
		require.NoError(t, err)
		f.client.do(ctx, t, "POST", "/api/v2/chats", string(body), &chat)
		ids[i] = chat.ID
	}
	return ids
}

// send sends chat i's prompt of turn turn.
func (f *partitionFixture) send(ctx context.Context, t *testing.T, id string, i, turn int) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"model_config_id": f.cfgID, "request_id": marker(i, turn),
		"content": []map[string]any{{"type": "text", "text": marker(i, turn)}}})
	require.NoError(t, err)
	f.client.do(ctx, t, "POST", "/api/v2/chats/"+id+"/messages", string(body), nil)
}

// release lets the cut-off worker's stream for chat i's turn finish.
func (f *partitionFixture) release(i, turn int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := marker(i, turn)
	if f.holds[m] == nil {
		f.holds[m] = make(chan struct{})
	}
	close(f.holds[m])
}

// streaming waits until the double streams, to callers at remote, a
// call for each of the markers, and returns them by marker.
func (f *partitionFixture) streaming(ctx context.Context, t *testing.T, remote string, markers ...string) map[string]strictllm.Exchange {
	t.Helper()
	for {
		found := map[string]strictllm.Exchange{}
		for _, e := range f.model.Exchanges() {
			if e.Remote == remote {
				found[chatMarker(e.Request)] = e
			}
		}
		all := true
		for _, m := range markers {
			_, ok := found[m]
			all = all && ok
		}
		if all {
			return found
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the model double saw calls from %s for %v, not all of %v\n%s", remote, keys(found), markers, f.Stderr())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// marker names chat i's prompt of turn turn; the double finds it in a
// call's messages.
func marker(i, turn int) string { return fmt.Sprintf("partition-chat-%d-turn-%d", i, turn) }

// chatMarker is the marker of the last prompt in a call ("" when none).
func chatMarker(req strictllm.Request) string {
	for j := len(req.Messages) - 1; j >= 0; j-- {
		m := req.Messages[j]
		if m.Role != "user" {
			continue
		}
		raw, _ := json.Marshal(m.Content)
		if i := strings.Index(string(raw), "partition-chat-"); i >= 0 {
			rest := string(raw)[i:]
			end := strings.IndexAny(rest, `"\`)
			if end < 0 {
				end = len(rest)
			}
			return rest[:end]
		}
	}
	return ""
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// installWriteAudit records every committed write to the chat tables with
// the writing session's client address and the server's clock: the
// cut-off worker's sessions come from its link address, everyone else's
// from loopback.
func installWriteAudit(t *testing.T, dbURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `
CREATE TABLE write_audit (at timestamptz NOT NULL, client inet, tbl text NOT NULL, op text NOT NULL, chat_id uuid);
CREATE FUNCTION write_audit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    row jsonb;
BEGIN
    IF TG_OP = 'DELETE' THEN row := to_jsonb(OLD); ELSE row := to_jsonb(NEW); END IF;
    INSERT INTO write_audit VALUES (clock_timestamp(), inet_client_addr(), TG_TABLE_NAME, TG_OP, (row ->> TG_ARGV[0])::uuid);
    RETURN NULL;
END $$;
CREATE TRIGGER write_audit AFTER INSERT OR UPDATE OR DELETE ON chats FOR EACH ROW EXECUTE FUNCTION write_audit('id');
CREATE TRIGGER write_audit AFTER INSERT OR UPDATE OR DELETE ON chat_messages FOR EACH ROW EXECUTE FUNCTION write_audit('chat_id');
CREATE TRIGGER write_audit AFTER INSERT OR UPDATE OR DELETE ON chat_heartbeats FOR EACH ROW EXECUTE FUNCTION write_audit('chat_id');
CREATE TRIGGER write_audit AFTER INSERT OR UPDATE OR DELETE ON chat_queued_messages FOR EACH ROW EXECUTE FUNCTION write_audit('chat_id');`)
	require.NoError(t, err)
}

// auditedWrite is one row of write_audit.
type auditedWrite struct {
	At     time.Time
	Client string
	Table  string
	Op     string
}

// writes are the audited writes to chat id, in order.
func writes(ctx context.Context, t *testing.T, dbURL, id string) []auditedWrite {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT at, coalesce(host(client), 'local'), tbl, op FROM write_audit WHERE chat_id = $1 ORDER BY at`, id)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[auditedWrite])
	require.NoError(t, err)
	return out
}

// modelRemote is the address worker i's calls reach the model double
// from: its link address in the namespace, or the host's side of that
// link for a worker on the host.
func (f *partitionFixture) modelRemote(i int) string {
	if i == 0 {
		return f.netLink.NS.String()
	}
	return f.netLink.Host.String()
}

// ended waits until every call from remote for the markers has ended,
// and returns them by marker.
func (f *partitionFixture) ended(ctx context.Context, t *testing.T, remote string, markers ...string) map[string]strictllm.Exchange {
	t.Helper()
	for {
		calls := f.streaming(ctx, t, remote, markers...)
		open := 0
		for _, e := range calls {
			if e.Ended.IsZero() {
				open++
			}
		}
		if open == 0 {
			return calls
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d model calls from %s still open\n%s", open, remote, f.Stderr())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// messages are chat id's messages, each as its role and text.
func (f *partitionFixture) messages(ctx context.Context, t *testing.T, id string) []string {
	t.Helper()
	var list struct {
		Messages []restMessage `json:"messages"`
	}
	f.client.do(ctx, t, "GET", "/api/v2/chats/"+id+"/messages", "", &list)
	out := make([]string, len(list.Messages))
	for i, m := range list.Messages {
		var text strings.Builder
		for _, p := range m.Content {
			text.WriteString(p.Text)
		}
		out[i] = m.Role + ": " + text.String()
	}
	return out
}

// sinceEach is how long after t0 each call started (when it has not
// ended) or ended, by marker.
func sinceEach(t0 time.Time, calls map[string]strictllm.Exchange) map[string]time.Duration {
	out := map[string]time.Duration{}
	for m, e := range calls {
		at := e.Ended
		if at.IsZero() {
			at = e.Started
		}
		out[m] = at.Sub(t0).Round(time.Millisecond)
	}
	return out
}

// owner is the worker and runner that own a chat.
type owner struct{ worker, runner uuid.UUID }

// chatOwners reads each chat's owner.
func chatOwners(ctx context.Context, t *testing.T, dbURL string, ids []string) map[string]owner {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	out := map[string]owner{}
	for _, id := range ids {
		var o owner
		require.NoError(t, conn.QueryRow(ctx, `SELECT worker_id, runner_id FROM chats WHERE id = $1`, id).Scan(&o.worker, &o.runner))
		out[id] = o
	}
	return out
}

// watchLeases polls the heartbeats of the given owners' runners until the
// test ends; the function it returns gives the last renewal seen per chat.
func watchLeases(ctx context.Context, t *testing.T, dbURL string, owners map[string]owner) func() map[string]time.Time {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	var mu sync.Mutex
	last := map[string]time.Time{}
	runners := make([]uuid.UUID, 0, len(owners))
	for _, o := range owners {
		runners = append(runners, o.runner)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close(context.Background())
		for ctx.Err() == nil {
			rows, err := conn.Query(ctx, `SELECT chat_id::text, heartbeat_at FROM chat_heartbeats WHERE runner_id = ANY($1)`, runners)
			if err == nil {
				for rows.Next() {
					var id string
					var at time.Time
					if rows.Scan(&id, &at) == nil {
						mu.Lock()
						if at.After(last[id]) {
							last[id] = at
						}
						mu.Unlock()
					}
				}
				rows.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() map[string]time.Time {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]time.Time{}
		for k, v := range last {
			out[k] = v
		}
		return out
	}
}

// waitRegistered waits until worker has renewed its registration
// (chat_workers.heartbeat_at) n times after since.
func waitRegistered(ctx context.Context, t *testing.T, dbURL string, worker uuid.UUID, since time.Time, n int) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	seen := map[time.Time]bool{}
	for len(seen) < n {
		var at time.Time
		err := conn.QueryRow(ctx, `SELECT heartbeat_at FROM chat_workers WHERE id = $1`, worker).Scan(&at)
		if err == nil && at.After(since) {
			seen[at] = true
		}
		select {
		case <-ctx.Done():
			t.Fatalf("worker %s renewed its registration %d times since %s, not %d", worker, len(seen), since, n)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
