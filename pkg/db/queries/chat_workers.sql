-- name: ChatWorkerUpsert :exec
-- Registers a worker, or renews its registration on a heartbeat tick.
INSERT INTO chat_workers (id, parts_addr, heartbeat_at)
VALUES (@id, @parts_addr, now())
ON CONFLICT (id) DO UPDATE SET parts_addr = EXCLUDED.parts_addr, heartbeat_at = EXCLUDED.heartbeat_at;

-- name: ChatWorkerGet :one
SELECT * FROM chat_workers WHERE id = @id;

-- name: ChatWorkerDelete :exec
-- A clean shutdown removes the worker's registration.
DELETE FROM chat_workers WHERE id = @id;

-- name: ChatWorkerDeleteStale :execrows
-- Prunes the registrations of workers that stopped renewing them (crashed,
-- or cut off from the database): a live worker renews its row on every
-- heartbeat tick, and upserts it again if it was pruned.
DELETE FROM chat_workers
WHERE heartbeat_at < now() - make_interval(secs => sqlc.arg(stale_seconds)::float8);
