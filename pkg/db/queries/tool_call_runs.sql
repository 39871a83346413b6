-- name: ToolCallStartRecord :exec
-- Records that a never_retry call is about to run. A second record of the
-- same call (a stale runner racing the new owner) keeps the first time.
INSERT INTO chat_tool_call_runs (chat_id, message_id, tool_call_id, started_at)
VALUES (@chat_id, @message_id, @tool_call_id, statement_timestamp())
ON CONFLICT (message_id, tool_call_id) DO UPDATE
SET started_at = COALESCE(chat_tool_call_runs.started_at, EXCLUDED.started_at);

-- name: ToolCallResultRecord :exec
-- Records the result of a call that finished while its batch runs on.
INSERT INTO chat_tool_call_runs (chat_id, message_id, tool_call_id, finished_at, result, is_error)
VALUES (@chat_id, @message_id, @tool_call_id, statement_timestamp(), @result, @is_error)
ON CONFLICT (message_id, tool_call_id) DO UPDATE
SET finished_at = EXCLUDED.finished_at, result = EXCLUDED.result, is_error = EXCLUDED.is_error;

-- name: ToolCallRunsOf :many
-- The recorded runs of a chat's calls in messages @message_ids.
SELECT message_id, tool_call_id, started_at, finished_at, result, is_error FROM chat_tool_call_runs
WHERE chat_id = @chat_id AND message_id = ANY(@message_ids::bigint[]);

-- name: ChatToolCallsUnderWay :many
-- The open tool calls of a running (or interrupting) chat, in the order a
-- worker runs them, with when their step was stored and what the worker
-- recorded of their runs: the messages view shows from them which call
-- runs and since when. The open calls are ChatMessageOpenToolCalls's; no
-- row when the chat is in any other status.
WITH tail AS (
    SELECT m.id, m.role, m.content, m.created_at
    FROM chat_messages m
    WHERE m.chat_id = @chat_id
      AND NOT m.deleted
      AND m.id > COALESCE((
          SELECT max(u.id) FROM chat_messages u
          WHERE u.chat_id = @chat_id AND NOT u.deleted AND u.role = 'user' AND u.visibility <> 'model'
      ), 0)
      AND EXISTS (
          SELECT 1 FROM chats c
          WHERE c.id = @chat_id AND c.status IN ('running', 'interrupting')
      )
),
calls AS (
    SELECT t.id AS message_id, t.created_at, p.ord, p.part->>'tool_call_id' AS tool_call_id,
        p.part->>'tool_name' AS tool_name
    FROM tail t, jsonb_array_elements(t.content) WITH ORDINALITY AS p(part, ord)
    WHERE t.role = 'assistant' AND p.part->>'type' = 'tool-call'
),
results AS (
    SELECT r.part->>'tool_call_id' AS tool_call_id
    FROM tail t, jsonb_array_elements(t.content) AS r(part)
    WHERE t.role = 'tool' AND r.part->>'type' = 'tool-result'
)
SELECT calls.message_id, calls.tool_call_id::text AS tool_call_id, calls.tool_name::text AS tool_name,
    calls.created_at AS stored_at, runs.started_at, runs.finished_at
FROM calls
LEFT JOIN chat_tool_call_runs runs
    ON runs.message_id = calls.message_id AND runs.tool_call_id = calls.tool_call_id
WHERE NOT EXISTS (SELECT 1 FROM results WHERE results.tool_call_id = calls.tool_call_id)
ORDER BY calls.message_id, calls.ord;
