-- name: ChatInsert :one
-- Create's row: snapshot_version starts at 1 (the creating snapshot); the
-- initial messages' insert trigger then sets history_version to 1.
INSERT INTO chats (
    id, organization_id, owner_id, parent_chat_id, root_chat_id,
    title, title_source, title_updated_at, system_prompt, dynamic_tools,
    last_model_config_id, last_reasoning_effort, project_id,
    status, snapshot_version, created_at, updated_at
) VALUES (
    @id, @organization_id, @owner_id, @parent_chat_id, @root_chat_id,
    @title, @title_source, @now, @system_prompt, @dynamic_tools,
    @last_model_config_id, @last_reasoning_effort, sqlc.narg(project_id),
    @status, 1, @now, @now
)
RETURNING *;

-- name: ChatLockShare :one
-- Child creation takes a shared lock on the family root, so it serializes
-- with a family archive (which locks the root for update first).
SELECT archived FROM chats WHERE id = @id FOR SHARE;

-- name: ChatLockAndBump :one
-- Opens every transition bundle: the UPDATE locks the row (FOR NO KEY UPDATE
-- strength, which conflicts with every other bundle and with a child
-- creation's FOR SHARE on its root) and advances snapshot_version exactly
-- once, before anything else is mutated.
UPDATE chats
SET snapshot_version = snapshot_version + 1
WHERE chats.id = @id
RETURNING *;

-- name: ChatQueueLenAndNow :one
-- The locked chat's queue length and the bundle's clock. Must run as its own
-- statement after the lock is held: under READ COMMITTED a subquery in the
-- locking statement would read the queue as of that statement's snapshot,
-- taken before the lock wait, and miss rows a bundle committed in between.
-- The clock is Postgres's, one for every worker and api replica whatever
-- their own clocks say, read once the lock is granted.
SELECT count(*)::bigint AS queue_len, statement_timestamp()::timestamptz AS now
FROM chat_queued_messages WHERE chat_id = @chat_id;

-- name: DatabaseNow :one
-- Postgres's clock, for a bundle that locks no chat row (Create).
SELECT statement_timestamp()::timestamptz AS now;

-- name: ChatGetWithQueueLen :one
SELECT sqlc.embed(chats),
    (SELECT count(*) FROM chat_queued_messages q WHERE q.chat_id = chats.id)::bigint AS queue_len
FROM chats
WHERE chats.id = @id;

-- name: ChatGet :one
SELECT * FROM chats WHERE id = @id;

-- name: ChatSetExecution :one
-- Writes the execution-state fields a transition computed. retry_state is
-- dropped whenever the status is not running (a pending retry belongs to the
-- running turn); the trigger then bumps retry_state_version.
UPDATE chats
SET status = @status,
    last_error = @last_error,
    retry_state = CASE WHEN @status::chat_status = 'running' THEN retry_state ELSE NULL END,
    requires_action_deadline_at = @requires_action_deadline_at,
    compaction_requested_at = @compaction_requested_at,
    last_model_config_id = COALESCE(sqlc.narg(model_config_id), last_model_config_id),
    last_reasoning_effort = COALESCE(sqlc.narg(reasoning_effort), last_reasoning_effort),
    updated_at = @now
WHERE id = @id
RETURNING *;

-- name: ChatSetArchived :one
UPDATE chats SET archived = @archived, updated_at = @now WHERE id = @id RETURNING *;

-- name: ChatSetOwner :one
UPDATE chats SET worker_id = @worker_id, runner_id = @runner_id WHERE id = @id RETURNING *;

-- name: ChatSetOwnerWithHeartbeat :one
-- Acquire's two writes in one round trip: the new owner, and its runner's
-- initial lease row on Postgres's clock like every renewal and lease check
-- (a worker whose own clock is off writes no stale lease).
WITH lease AS (
    INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at)
    VALUES (@id, @runner_id::uuid, statement_timestamp())
    ON CONFLICT (chat_id, runner_id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at
)
UPDATE chats SET worker_id = @worker_id::uuid, runner_id = @runner_id::uuid WHERE id = @id RETURNING *;

-- name: ChatIncrementGenerationAttempt :one
UPDATE chats SET generation_attempt = generation_attempt + 1 WHERE id = @id RETURNING *;

-- name: ChatSetRetryState :one
UPDATE chats SET retry_state = @retry_state WHERE id = @id RETURNING *;

-- name: ChatRequestCompaction :one
-- RequestCompaction inserts no message, so it does by hand what a history
-- change does through the trigger: history_version follows the snapshot and
-- generation_attempt restarts (the retry trigger clears retry_state).
UPDATE chats
SET status = 'running',
    last_error = NULL,
    compaction_requested_at = @now,
    requires_action_deadline_at = NULL,
    history_version = snapshot_version,
    generation_attempt = 0,
    updated_at = @now
WHERE id = @id
RETURNING *;

-- name: ChatReconcileInvalid :one
UPDATE chats
SET archived = false,
    status = 'error',
    last_error = @last_error,
    retry_state = NULL,
    requires_action_deadline_at = NULL,
    compaction_requested_at = NULL,
    updated_at = @now
WHERE id = @id
RETURNING *;

-- name: ChatListFamilyForUpdate :many
-- The chat and every descendant, locked in a stable order after the root.
WITH RECURSIVE family AS (
    SELECT c.id, 0 AS depth FROM chats c WHERE c.id = @id
    UNION ALL
    SELECT c.id, f.depth + 1 FROM chats c JOIN family f ON c.parent_chat_id = f.id
)
SELECT family.id FROM family ORDER BY family.depth, family.id;

-- name: ChatLockForUpdate :one
SELECT * FROM chats WHERE id = @id FOR UPDATE;

-- name: ChatListByOwner :many
-- Newest first, keyset-paginated on (created_at, id).
SELECT * FROM chats
WHERE owner_id = @owner_id
  AND organization_id = @organization_id
  AND (sqlc.narg(archived)::boolean IS NULL OR archived = sqlc.narg(archived)::boolean)
  AND (sqlc.narg(before_created_at)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(before_created_at)::timestamptz, sqlc.narg(before_id)::uuid))
ORDER BY created_at DESC, id DESC
LIMIT @page_limit;

-- name: ChatSetTitle :one
-- A title write applies only when the stored title's source ranks the same
-- as or lower than the incoming one (fallback < generated < user). It sets
-- title_updated_at and leaves updated_at alone. A user title rewritten with
-- the same text is not written again.
UPDATE chats
SET title = @title, title_source = @title_source, title_updated_at = @now
WHERE id = @id
  AND array_position(enum_range(NULL::chat_title_source), title_source)
      <= array_position(enum_range(NULL::chat_title_source), @title_source::chat_title_source)
  AND NOT (title_source = 'user' AND @title_source::chat_title_source = 'user' AND title = @title)
RETURNING *;

-- name: ChatLockForShare :one
-- A read-only view of a chat under a row lock that waits for any bundle in
-- flight and blocks new ones until the view ends; it bumps nothing.
SELECT * FROM chats WHERE id = @id FOR SHARE;

-- name: ChatSetDynamicTools :one
-- Replaces the chat's client tools (metadata, not execution state): the
-- model is offered them from its next step on.
UPDATE chats SET dynamic_tools = @dynamic_tools
WHERE id = @id
RETURNING *;
