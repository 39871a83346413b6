-- name: OpenAIResponseEvents :many
-- A response's stream events from seq from_seq on, in order.
SELECT seq, type, data FROM openai_response_events
WHERE response_id = @response_id AND seq >= sqlc.arg(from_seq)::int
ORDER BY seq;

-- name: OpenAIResponseEventsAppend :execrows
-- Appends events at first_seq, first_seq + 1, ... in one statement, only
-- while the chat's snapshot_version is still basis, the version the events
-- were computed from. The FOR SHARE waits for a transition in flight and
-- then sees its new version (nothing is inserted), and holds the next
-- transition until the events are committed: a reader that sees a chat
-- state newer than basis sees these events too. A seq already taken (a
-- writer on another replica came first) fails the whole statement with a
-- unique violation; 0 rows means the chat moved on.
INSERT INTO openai_response_events (response_id, seq, type, data)
SELECT sqlc.arg(response_id)::uuid, sqlc.arg(first_seq)::int + (t.i - 1)::int, t.type, d.data::json
FROM unnest(sqlc.arg(types)::text[]) WITH ORDINALITY AS t(type, i)
JOIN unnest(sqlc.arg(datas)::text[]) WITH ORDINALITY AS d(data, i) ON d.i = t.i
WHERE EXISTS (
    SELECT 1 FROM chats c WHERE c.id = sqlc.arg(chat_id)::uuid AND c.snapshot_version = sqlc.arg(basis)::bigint FOR SHARE
);
