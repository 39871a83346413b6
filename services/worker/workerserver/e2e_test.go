package workerserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/chatd/chatd/pkg/chatmsg"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/dbtest"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/natstest"
	"github.com/chatd/chatd/pkg/notify"
	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/pkg/service/servicetest"
)

// startWorker runs the whole worker (acquisition, manager, real runners,
// scripted model) in process until the test ends or stop is called; stop
// is SIGTERM: the worker drains for drain, then releases its chats.
func startWorker(t testing.TB, dbURL, natsURL string) (stop func()) {
	return startWorkerDraining(t, dbURL, natsURL, 5)
}

func startWorkerDraining(t testing.TB, dbURL, natsURL string, drainSeconds int) (stop func()) {
	stop, _ = startWorkerAt(t, dbURL, natsURL, drainSeconds)
	return stop
}

// startWorkerAt is startWorkerDraining that also returns the worker's gRPC
// address (PartsService).
func startWorkerAt(t testing.TB, dbURL, natsURL string, drainSeconds int) (stop func(), addr string) {
	t.Helper()
	return startWorkerWith(t, dbURL, natsURL, func(c *Config) { c.DrainSeconds = drainSeconds })
}

// startWorkerWith is startWorkerAt with the test's settings applied by
// configure.
func startWorkerWith(t testing.TB, dbURL, natsURL string, configure func(*Config)) (stop func(), addr string) {
	t.Helper()
	addr = servicetest.FreeAddr(t)
	cfg := &Config{
		Common: service.Common{
			DatabaseURL: dbURL, NATSURL: natsURL, GRPCAddr: addr, ShutdownTimeout: 5 * time.Second,
			Embedded: service.Embedded{DBTracer: dbtest.Guard(t)},
		},
		LeaseSeconds: 30, DrainSeconds: 5, AcquireInterval: time.Second,
		MaxRootChats: 0, MaxSubagentChats: 0, MaxGenerationRetries: 25, MaxStepsPerTurn: 1200,
	}
	configure(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Error("worker did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop, addr
}

// e2e is a database, NATS and a state machine for end-to-end tests.
type e2e struct {
	t              testing.TB
	ctx            context.Context
	dbURL, natsURL string
	pool           *pgxpool.Pool
	m              *chatstate.Machine
	org, user      uuid.UUID
}

func newE2E(t testing.TB) *e2e {
	e := &e2e{t: t, ctx: context.Background(), dbURL: dbtest.NewDatabase(t), natsURL: natstest.URL(t), org: uuid.New(), user: uuid.New()}
	pool := dbtest.NewPoolOn(t, e.dbURL, dbpool.Options{MaxConns: 32})
	e.pool = pool
	e.m = chatstate.New(pool, chatstate.Config{AfterCommit: notify.NewPublisher(natstest.Connect(t, e.natsURL), nil).AfterCommit})
	q := queries.New(pool)
	require.NoError(t, q.OrganizationEnsure(e.ctx, queries.OrganizationEnsureParams{ID: e.org}))
	require.NoError(t, q.UserEnsure(e.ctx, queries.UserEnsureParams{ID: e.user}))
	return e
}

func (e *e2e) chat(prompt string) uuid.UUID {
	id := uuid.New()
	_, err := e.m.Create(e.ctx, chatstate.CreateParams{
		ID: id, OrganizationID: e.org, OwnerID: e.user, Title: "t",
		Messages: []chatstate.NewMessage{chatstate.UserMessage(chatmsg.Content{chatmsg.Text(prompt)})},
	})
	require.NoError(e.t, err)
	return id
}

func (e *e2e) waitStatus(id uuid.UUID, status chatstate.Status) {
	require.Eventually(e.t, func() bool {
		s, err := e.m.Get(e.ctx, id)
		return err == nil && s.Chat.Status == status
	}, 60*time.Second, 10*time.Millisecond, "chat %s never reached %s", id, status)
}

func (e *e2e) replies(id uuid.UUID) []string {
	msgs, err := queries.New(e.pool).ChatMessageListActive(e.ctx, id)
	require.NoError(e.t, err)
	var out []string
	for _, msg := range msgs {
		if msg.Role == chatstate.RoleAssistant {
			c, err := chatmsg.ParseContent(msg.Content)
			require.NoError(e.t, err)
			out = append(out, c.PlainText())
		}
	}
	return out
}

// TestTakeoverFinishesTheTurn: a chat owned by a worker that died (its
// heartbeat is older than the lease) is taken over by a live worker, which
// finishes the turn.
func TestTakeoverFinishesTheTurn(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	id := e.chat("::reply after takeover")
	dead := uuid.New()
	_, err := e.m.Update(e.ctx, id, func(tx *chatstate.Tx) error { return tx.Acquire(e.ctx, dead, uuid.New()) })
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, "UPDATE chat_heartbeats SET heartbeat_at = now() - interval '5 minutes' WHERE chat_id = $1", id)
	require.NoError(t, err)

	startWorker(t, e.dbURL, e.natsURL)
	e.waitStatus(id, chatstate.StatusWaiting)
	require.Equal(t, []string{"after takeover"}, e.replies(id))
}

// TestDrainHandsChatsToAnotherWorker: a worker stopped mid-turn with no
// drain time releases its chat at once; the other worker finishes it.
func TestDrainHandsChatsToAnotherWorker(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	stopA := startWorkerDraining(t, e.dbURL, e.natsURL, 0)
	id := uuid.New()
	var mu sync.Mutex
	owners := map[uuid.UUID]bool{}
	nc := natstest.Connect(t, e.natsURL)
	_, err := notify.SubscribeUpdates(nc, id, func(n *chatdv1.ChatUpdateNotification) {
		if n.WorkerId != nil {
			mu.Lock()
			owners[uuid.MustParse(n.GetWorkerId())] = true
			mu.Unlock()
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	_, err = e.m.Create(e.ctx, chatstate.CreateParams{
		ID: id, OrganizationID: e.org, OwnerID: e.user, Title: "t",
		Messages: []chatstate.NewMessage{chatstate.UserMessage(chatmsg.Content{chatmsg.Text("::stream 60 20")})},
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s, err := e.m.Get(e.ctx, id)
		return err == nil && s.Chat.WorkerID != nil
	}, 30*time.Second, 5*time.Millisecond)
	first, err := e.m.Get(e.ctx, id)
	require.NoError(t, err)
	workerA := *first.Chat.WorkerID

	startWorker(t, e.dbURL, e.natsURL) // B
	stopA()
	e.waitStatus(id, chatstate.StatusWaiting)
	mu.Lock()
	require.Len(t, owners, 2, "worker B took the chat over")
	require.True(t, owners[workerA])
	mu.Unlock()
	replies := e.replies(id)
	require.Len(t, replies, 1, "the turn is answered once")
	require.True(t, strings.HasPrefix(replies[0], "tok1 tok2"), replies[0])
	require.True(t, strings.HasSuffix(replies[0], "tok60"), replies[0])
}

// TestWorkersCompleteEveryTurnOnce: two, then three workers race for 200
// chats whose prompts the scripted model answers; every chat ends waiting
// with exactly its own reply, so every turn ran exactly once.
func TestWorkersCompleteEveryTurnOnce(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			t.Parallel()
			e := newE2E(t)
			for i := 0; i < workers; i++ {
				startWorker(t, e.dbURL, e.natsURL)
			}
			const chats = 200
			ids := make([]uuid.UUID, chats)
			for i := range ids {
				ids[i] = e.chat(fmt.Sprintf("::reply answer %d", i))
			}
			require.Eventually(t, func() bool {
				var waiting int
				err := e.pool.QueryRow(e.ctx, "SELECT count(*) FROM chats WHERE status = 'waiting'").Scan(&waiting)
				return err == nil && waiting == chats
			}, 120*time.Second, 20*time.Millisecond, "every chat finishes its turn")
			for i, id := range ids {
				require.Equal(t, []string{fmt.Sprintf("answer %d", i)}, e.replies(id), "chat %d answered exactly once", i)
			}
		})
	}
}

// TestPartsStreamFromTheOwningWorker: while a worker streams a reply, its
// PartsService delivers the episode's parts live, in seq order, and the
// text they carry is the reply the worker commits.
func TestPartsStreamFromTheOwningWorker(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	_, addr := startWorkerAt(t, e.dbURL, e.natsURL, 5)
	id := e.chat("::stream 30 30")
	var snap chatstate.Snapshot
	require.Eventually(t, func() bool {
		var err error
		snap, err = e.m.Get(e.ctx, id)
		return err == nil && snap.Chat.GenerationAttempt >= 1
	}, 30*time.Second, 5*time.Millisecond)

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	stream, err := chatdv1.NewPartsServiceClient(conn).StreamParts(e.ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&chatdv1.StreamPartsRequest{
		ChatId: id.String(), HistoryVersion: snap.Chat.HistoryVersion, GenerationAttempt: snap.Chat.GenerationAttempt,
	}))
	var text strings.Builder
	var seq int64
	for {
		resp, err := stream.Recv()
		require.NoError(t, err)
		if resp.GetEpisodeClosed() != nil {
			require.Equal(t, seq, resp.GetEpisodeClosed().GetLastSeq())
			break
		}
		p := resp.GetPart()
		require.Equal(t, seq+1, p.GetSeq(), "seq is contiguous")
		seq = p.GetSeq()
		var d struct {
			Type, Text string
		}
		require.NoError(t, json.Unmarshal([]byte(p.GetData()), &d))
		if d.Type == "text" {
			text.WriteString(d.Text)
		}
	}
	require.NoError(t, stream.CloseSend())
	e.waitStatus(id, chatstate.StatusWaiting)
	require.Equal(t, []string{text.String()}, e.replies(id), "the streamed parts are the committed reply")
}

// TestSimpleTurnCostsTwoWorkerBundles: a turn answered with plain text, from
// a prompt to a waiting chat no worker owns, is two worker bundles (each
// advances snapshot_version by exactly one): Acquire with the first
// RecordGenerationAttempt, and CommitStep with FinishTurn and Abandon. The
// next prompt sent to the waiting chat costs the same two after its own
// SendMessage bundle.
func TestSimpleTurnCostsTwoWorkerBundles(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	id := e.chat("::reply ok")
	startWorker(t, e.dbURL, e.natsURL)
	idle := func() queries.Chat {
		t.Helper()
		var c queries.Chat
		require.Eventually(t, func() bool {
			s, err := e.m.Get(e.ctx, id)
			c = s.Chat
			return err == nil && c.Status == chatstate.StatusWaiting && c.WorkerID == nil
		}, 60*time.Second, 5*time.Millisecond, "chat %s never became idle", id)
		return c
	}
	first := idle()
	require.Equal(t, int64(1+2), first.SnapshotVersion, "Create, then two worker bundles")
	require.Equal(t, []string{"ok"}, e.replies(id))

	_, err := e.m.Update(e.ctx, id, func(tx *chatstate.Tx) error {
		_, err := tx.SendMessage(e.ctx, chatstate.UserMessage(chatmsg.Content{chatmsg.Text("::reply again")}), chatstate.BusyQueue)
		return err
	})
	require.NoError(t, err)
	second := idle()
	require.Equal(t, first.SnapshotVersion+1+2, second.SnapshotVersion, "SendMessage, then two worker bundles")
	require.Equal(t, []string{"ok", "again"}, e.replies(id))
}
