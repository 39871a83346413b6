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
