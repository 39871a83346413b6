-- +goose Up
-- Answers the tool calls older versions of chatd left without a result
-- before a later prompt, so history itself has no unanswered call.
--
-- Older versions could leave a call open when a lifecycle hook failed in
-- the middle of a batch: the calls after it got no result, and the
-- model-only rows stored after them hid them from the query that finds
-- open calls, so no later prompt answered them. Prompts have since been
-- built with an error result for such a call (the worker's
-- unansweredResult); this stores that same result, so history says what
-- the model was shown.
--
-- A call is open when no tool row after its assistant message, and before
-- the next assistant message calling the same ID (a model may reuse call
-- IDs across steps), answers it. Only calls with a visible prompt after
-- them are answered here: a call after a chat's latest prompt belongs to
-- the turn the worker runs, which answers it by its effect policy.
--
-- Each chat with such calls gets one tool row with their error results,
-- stored like a transition stores a message: the chat's snapshot_version
-- is advanced first, and the insert trigger stamps the row's revision and
-- the chat's history_version with it (docs/spec "Message revisions and
-- history version"). No stored row is changed: a committed message's
-- content is never updated (the worker's prompt cache relies on it). The
-- row is the newest of its chat; a prompt puts each result right after
-- its call wherever the result is stored.
-- +goose StatementBegin
DO $$
DECLARE
  c record;
BEGIN
  FOR c IN
    WITH calls AS MATERIALIZED (
      SELECT m.chat_id, m.id AS message_id, p.ord,
             p.part->>'tool_call_id' AS tool_call_id, p.part->>'tool_name' AS tool_name
      FROM chat_messages m, jsonb_array_elements(m.content) WITH ORDINALITY AS p(part, ord)
      WHERE NOT m.deleted AND m.role = 'assistant' AND p.part->>'type' = 'tool-call'
    ),
    bounded AS (
      -- The next assistant message calling the same ID bounds where a
      -- result can answer this call.
      SELECT calls.*, (
        SELECT min(later.message_id) FROM calls later
        WHERE later.chat_id = calls.chat_id AND later.tool_call_id = calls.tool_call_id
          AND later.message_id > calls.message_id
      ) AS reused_at
      FROM calls
    ),
    results AS MATERIALIZED (
      SELECT t.chat_id, t.id AS message_id, r.part->>'tool_call_id' AS tool_call_id
      FROM chat_messages t, jsonb_array_elements(t.content) AS r(part)
      WHERE NOT t.deleted AND t.role = 'tool' AND r.part->>'type' = 'tool-result'
    ),
    prompts AS (
      SELECT u.chat_id, max(u.id) AS latest
      FROM chat_messages u
      WHERE NOT u.deleted AND u.role = 'user' AND u.visibility <> 'model'
      GROUP BY u.chat_id
    ),
    unanswered AS (
      SELECT b.* FROM bounded b
      JOIN prompts ON prompts.chat_id = b.chat_id AND prompts.latest > b.message_id
      WHERE NOT EXISTS (
        SELECT 1 FROM results r
        WHERE r.chat_id = b.chat_id AND r.tool_call_id = b.tool_call_id
          AND r.message_id > b.message_id AND (b.reused_at IS NULL OR r.message_id < b.reused_at)
      )
    )
    SELECT chat_id, jsonb_agg(jsonb_build_object(
             'type', 'tool-result',
             'tool_call_id', tool_call_id,
             'tool_name', tool_name,
             'result', jsonb_build_object('error',
               'the tool call was interrupted and its result was not stored; it may or may not have taken effect'),
             'is_error', true
           ) ORDER BY message_id, ord) AS content
    FROM unanswered
    GROUP BY chat_id
  LOOP
    UPDATE chats SET snapshot_version = snapshot_version + 1 WHERE id = c.chat_id;
    INSERT INTO chat_messages (chat_id, role, content, visibility, created_at)
    VALUES (c.chat_id, 'tool', c.content, 'both', now());
  END LOOP;
END $$;
-- +goose StatementEnd

-- +goose Down
-- The answers stay: removing them would leave the calls open again.
SELECT 1;
