-- name: ToolCallStartRecord :exec
-- Records that a never_retry call is about to run. A second record of the
-- same call (a stale runner racing the new owner) changes nothing.
INSERT INTO chat_tool_call_starts (chat_id, message_id, tool_call_id)
VALUES (@chat_id, @message_id, @tool_call_id)
ON CONFLICT (message_id, tool_call_id) DO NOTHING;

-- name: ToolCallStartsOf :many
-- The start records of a chat's calls in message @message_ids.
SELECT message_id, tool_call_id, started_at FROM chat_tool_call_starts
WHERE chat_id = @chat_id AND message_id = ANY(@message_ids::bigint[]);
