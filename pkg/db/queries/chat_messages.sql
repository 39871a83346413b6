-- name: ChatMessageInsert :one
INSERT INTO chat_messages (
    chat_id, role, content, visibility, compressed, queued_message_id,
    model_config_id, reasoning_effort, usage, created_by, created_at, turn_id
) VALUES (
    @chat_id, @role, @content, @visibility, @compressed, @queued_message_id,
    @model_config_id, @reasoning_effort, @usage, @created_by, @created_at, @turn_id
)
RETURNING *;

-- name: ChatMessageReserveID :one
-- Takes the next message ID ahead of the insert, for a bundle that sends
-- its insert with the COMMIT (chatstate: a turn's user message). Taken
-- under the chat's lock, it is greater than every message ID the chat
-- holds, like one the insert would take.
SELECT nextval(pg_get_serial_sequence('chat_messages', 'id'))::bigint AS id;

-- name: ChatMessageInsertWithID :one
-- ChatMessageInsert with an ID taken by ChatMessageReserveID.
INSERT INTO chat_messages (
    id, chat_id, role, content, visibility, compressed, queued_message_id,
    model_config_id, reasoning_effort, usage, created_by, created_at, turn_id
) OVERRIDING SYSTEM VALUE VALUES (
    @id, @chat_id, @role, @content, @visibility, @compressed, @queued_message_id,
    @model_config_id, @reasoning_effort, @usage, @created_by, @created_at, @turn_id
)
RETURNING *;

-- name: ChatMessageGet :one
SELECT * FROM chat_messages WHERE chat_id = @chat_id AND id = @id;

-- name: ChatMessageListActive :many
SELECT * FROM chat_messages WHERE chat_id = @chat_id AND NOT deleted ORDER BY id;

-- name: ChatMessageListChangedSince :many
-- Every message written after history version @since, deleted ones
-- included: a message's revision is the snapshot_version of the bundle
-- that last wrote it, so these rows are exactly what a reader holding the
-- active history as of @since applies to catch up (chatstate.HistoryCache).
SELECT * FROM chat_messages WHERE chat_id = @chat_id AND revision > @since ORDER BY id;

-- name: ChatMessageListAll :many
SELECT * FROM chat_messages WHERE chat_id = @chat_id ORDER BY id;

-- name: ChatMessageSoftDeleteFrom :execrows
-- EditMessage truncates the active history at the edited message.
UPDATE chat_messages SET deleted = true
WHERE chat_id = @chat_id AND id >= @from_id AND NOT deleted;

-- name: ChatMessageOpenToolCalls :many
-- Tool calls in active history with no tool result yet, whatever rows follow
-- them. Every transition that inserts a prompt (a user row the user sees)
-- answers open calls first, so none can precede the latest active prompt;
-- scanning only after it keeps this cheap. Model-only user rows (hook
-- context, a compaction's replay) are no prompt: a call stays open across
-- them.
WITH tail AS (
    SELECT m.id, m.role, m.content
    FROM chat_messages m
    WHERE m.chat_id = @chat_id
      AND NOT m.deleted
      AND m.id > COALESCE((
          SELECT max(u.id) FROM chat_messages u
          WHERE u.chat_id = @chat_id AND NOT u.deleted AND u.role = 'user' AND u.visibility <> 'model'
      ), 0)
),
calls AS (
    SELECT t.id AS message_id, p.ord, p.part->>'tool_call_id' AS tool_call_id, p.part->>'tool_name' AS tool_name
    FROM tail t, jsonb_array_elements(t.content) WITH ORDINALITY AS p(part, ord)
    WHERE t.role = 'assistant' AND p.part->>'type' = 'tool-call'
),
results AS (
    SELECT r.part->>'tool_call_id' AS tool_call_id
    FROM tail t, jsonb_array_elements(t.content) AS r(part)
    WHERE t.role = 'tool' AND r.part->>'type' = 'tool-result'
)
SELECT calls.message_id, calls.tool_call_id::text AS tool_call_id, calls.tool_name::text AS tool_name
FROM calls
WHERE NOT EXISTS (SELECT 1 FROM results WHERE results.tool_call_id = calls.tool_call_id)
ORDER BY calls.message_id, calls.ord;

-- name: ChatMessageOpenToolCallsIfAction :many
-- ChatMessageOpenToolCalls with each call's arguments, when the chat waits
-- in requires_action on a history newer than @seen_history, and no row
-- otherwise: a stream's read sends it beside the chat's own read, in the
-- same snapshot, before it knows the status.
WITH tail AS (
    SELECT m.id, m.role, m.content
    FROM chat_messages m
    WHERE m.chat_id = @chat_id
      AND NOT m.deleted
      AND m.id > COALESCE((
          SELECT max(u.id) FROM chat_messages u
          WHERE u.chat_id = @chat_id AND NOT u.deleted AND u.role = 'user' AND u.visibility <> 'model'
      ), 0)
      AND EXISTS (
          SELECT 1 FROM chats c
          WHERE c.id = @chat_id AND c.status = 'requires_action' AND c.history_version > @seen_history
      )
),
calls AS (
    SELECT t.id AS message_id, p.ord, p.part->>'tool_call_id' AS tool_call_id, p.part->>'tool_name' AS tool_name,
        p.part->'args' AS args, COALESCE(p.part->>'idempotency_key', '') AS idempotency_key
    FROM tail t, jsonb_array_elements(t.content) WITH ORDINALITY AS p(part, ord)
    WHERE t.role = 'assistant' AND p.part->>'type' = 'tool-call'
),
results AS (
    SELECT r.part->>'tool_call_id' AS tool_call_id
    FROM tail t, jsonb_array_elements(t.content) AS r(part)
    WHERE t.role = 'tool' AND r.part->>'type' = 'tool-result'
)
SELECT calls.message_id, calls.tool_call_id::text AS tool_call_id, calls.tool_name::text AS tool_name, calls.args::jsonb AS args,
    calls.idempotency_key::text AS idempotency_key
FROM calls
WHERE NOT EXISTS (SELECT 1 FROM results WHERE results.tool_call_id = calls.tool_call_id)
ORDER BY calls.message_id, calls.ord;

-- name: ChatMessageListVisibleIfDeletedSince :many
-- The transcript a user sees (ChatMessageListVisible) when a message was
-- deleted after history version @since, and no row otherwise: a stream's
-- read sends it beside the changed rows, in the same snapshot, for the
-- full refresh a deletion calls for.
SELECT m.* FROM chat_messages m
WHERE m.chat_id = @chat_id AND NOT m.deleted AND m.visibility <> 'model'
  AND EXISTS (
      SELECT 1 FROM chat_messages d
      WHERE d.chat_id = @chat_id AND d.revision > @since AND d.deleted
  )
ORDER BY m.id;

-- name: ChatMessageListVisible :many
-- The transcript a user sees: active rows that are not model-only.
SELECT * FROM chat_messages
WHERE chat_id = @chat_id AND NOT deleted AND visibility <> 'model'
ORDER BY id;

-- name: ChatMessagePageBefore :many
-- A page of the visible transcript ending before @before_id (the newest
-- page when it is NULL), newest first: the caller reverses it.
SELECT * FROM chat_messages
WHERE chat_id = @chat_id AND NOT deleted AND visibility <> 'model'
  AND (sqlc.narg(before_id)::bigint IS NULL OR id < sqlc.narg(before_id)::bigint)
ORDER BY id DESC
LIMIT @page_limit;

-- name: ChatMessagePageAfter :many
-- A page of the visible transcript starting after @after_id, oldest first.
SELECT * FROM chat_messages
WHERE chat_id = @chat_id AND NOT deleted AND visibility <> 'model'
  AND id > @after_id
ORDER BY id
LIMIT @page_limit;

-- name: ChatMessageVisibleBounds :one
-- The first and last visible message IDs (0 and 0 for an empty transcript),
-- so a page can say whether older and newer pages exist.
SELECT COALESCE(MIN(id), 0)::bigint AS first_id, COALESCE(MAX(id), 0)::bigint AS last_id
FROM chat_messages
WHERE chat_id = @chat_id AND NOT deleted AND visibility <> 'model';
