-- name: ChatAcquireListCandidates :many
-- Runnable chats (R0 R1 I0 I1 A0 A1, that is status running, interrupting or
-- requires_action and not archived) that no worker owns, or whose owner's
-- heartbeat row is missing or stale. Read without locks; every candidate is
-- rechecked under its row lock before Acquire.
SELECT c.id, c.parent_chat_id, c.worker_id
FROM chats c
WHERE c.status IN ('running', 'interrupting', 'requires_action')
  AND NOT c.archived
  AND (
    c.worker_id IS NULL
    OR c.runner_id IS NULL
    OR NOT EXISTS (
      SELECT 1 FROM chat_heartbeats hb
      WHERE hb.chat_id = c.id
        AND hb.runner_id = c.runner_id
        AND hb.heartbeat_at > statement_timestamp() - make_interval(secs => sqlc.arg(lease_seconds)::float8)
    )
  )
ORDER BY c.created_at, c.id
LIMIT @max_chats;

-- name: ChatHeartbeatIsFresh :one
-- Whether (chat_id, runner_id) holds a fresh lease. Read after the limiter
-- lock is granted, statement_timestamp() cannot predate a renewal that
-- committed before the lock was.
SELECT EXISTS (
  SELECT 1 FROM chat_heartbeats hb
  WHERE hb.chat_id = @chat_id
    AND hb.runner_id = @runner_id
    AND hb.heartbeat_at > statement_timestamp() - make_interval(secs => sqlc.arg(lease_seconds)::float8)
)::bool AS fresh;

-- name: ChatLimiterLock :exec
-- The capacity admission lock, held until the transaction ends, waited for
-- at most lock_timeout. Like SET LOCAL lock_timeout, the set_config bounds
-- that wait (and every later lock) for the rest of the transaction; it
-- runs first because the outer row is built from the subquery's, and both
-- go in one round trip on the acquisition's path.
SELECT pg_advisory_xact_lock(@lock_key::bigint)
FROM (SELECT set_config('lock_timeout', @lock_timeout::text, true)) AS timeout;

-- name: ChatLimiterCountOwned :one
-- Slots in use, that is chats owned by a runner whose lease is fresh, split into
-- root chats and subagent chats.
SELECT
  count(*) FILTER (WHERE c.parent_chat_id IS NULL)::bigint AS root_chats,
  count(*) FILTER (WHERE c.parent_chat_id IS NOT NULL)::bigint AS subagent_chats
FROM chat_heartbeats hb
JOIN chats c
  ON c.id = hb.chat_id
 AND c.runner_id = hb.runner_id
 AND c.worker_id IS NOT NULL
WHERE hb.heartbeat_at > statement_timestamp() - make_interval(secs => sqlc.arg(lease_seconds)::float8);

-- name: ChatHeartbeatDeleteStale :execrows
-- The heartbeat cleanup loop.
DELETE FROM chat_heartbeats
WHERE heartbeat_at < now() - make_interval(secs => sqlc.arg(lease_seconds)::float8);

-- name: ChatListByIDs :many
-- The runner manager's database sync, every chat it runs, in one query.
SELECT * FROM chats WHERE id = ANY(@ids::uuid[]);
