-- name: ChatHeartbeatInsert :exec
-- Acquire's initial lease row, on Postgres's clock like every renewal and
-- lease check: a worker whose own clock is off writes no stale lease.
INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at)
VALUES (@chat_id, @runner_id, statement_timestamp())
ON CONFLICT (chat_id, runner_id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at;

-- name: ChatHeartbeatGet :one
SELECT * FROM chat_heartbeats WHERE chat_id = @chat_id AND runner_id = @runner_id;
