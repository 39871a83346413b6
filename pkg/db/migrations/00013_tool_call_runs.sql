-- +goose Up
-- What the worker knows of a stored tool call's run before its result is
-- in history (the results of a step's calls are stored together, after
-- the batch):
--   started_at: a call whose effect policy is never_retry is recorded as
--     started before it runs, so a runner that resumes the turn after a
--     crash, a drain or a lost lease knows the call may have taken effect
--     and answers it with an "interrupted" error result instead of running
--     it again. A call with no start never started and runs normally.
--   result, is_error, finished_at: a call of a batch that finished while
--     others still run, so an interrupt or a resumed turn stores its real
--     result instead of running it again or calling it interrupted.
-- The key is the stored call: its assistant message and the model's call
-- ID (a model may reuse call IDs across steps).
CREATE TABLE chat_tool_call_runs (
    chat_id uuid NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    message_id bigint NOT NULL REFERENCES chat_messages(id) ON DELETE CASCADE,
    tool_call_id text NOT NULL,
    started_at timestamptz,
    finished_at timestamptz,
    result jsonb,
    is_error boolean NOT NULL DEFAULT false,
    PRIMARY KEY (message_id, tool_call_id)
);

CREATE INDEX chat_tool_call_runs_chat_id_idx ON chat_tool_call_runs (chat_id);

-- An operator's override of the effect policy of an MCP server's tools:
-- tool name (as the server names it) or "*" (every tool of the server) to
-- "retry" or "never_retry". A tool with no entry follows its annotations.
ALTER TABLE chat_mcp_servers ADD COLUMN tool_effect_policies jsonb NOT NULL DEFAULT '{}'::jsonb;
-- The deadline of one call to this server's tools, overriding the worker's
-- CHATD_TOOL_TIMEOUT; NULL: the worker's.
ALTER TABLE chat_mcp_servers ADD COLUMN tool_timeout_seconds integer
    CHECK (tool_timeout_seconds IS NULL OR tool_timeout_seconds > 0);

-- +goose Down
ALTER TABLE chat_mcp_servers DROP COLUMN tool_timeout_seconds;
ALTER TABLE chat_mcp_servers DROP COLUMN tool_effect_policies;
DROP TABLE chat_tool_call_runs;
