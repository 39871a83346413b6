-- +goose Up
-- The worker registry: one row per live worker process, so relays can find
-- the PartsService of the worker that owns a chat (chats.worker_id). A
-- worker upserts its row at start and on every heartbeat tick and deletes it
-- on a clean shutdown; a crashed worker's row goes stale and is ignored by
-- readers that check heartbeat_at. Like chat_heartbeats it is rebuilt by
-- live workers, so it need not survive a crash.
CREATE UNLOGGED TABLE chat_workers (
    id uuid PRIMARY KEY,
    parts_addr text NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE chat_workers;
