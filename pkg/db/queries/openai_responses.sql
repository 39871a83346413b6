-- name: OpenAIResponseInsert :one
INSERT INTO openai_responses (id, organization_id, owner_id, chat_id, message_id, queued_message_id,
    model, instructions, metadata, background, previous_response_id, conversation, tools, tool_choice,
    idempotency_key)
VALUES (@id, @organization_id, @owner_id, @chat_id, sqlc.narg(message_id), sqlc.narg(queued_message_id),
    @model, sqlc.narg(instructions), @metadata, @background, sqlc.narg(previous_response_id), @conversation,
    @tools, @tool_choice, sqlc.narg(idempotency_key))
RETURNING *;

-- name: OpenAIResponseOfTurn :one
-- The response of a turn, by the message that starts it (a user message,
-- or the tool results that continue a turn) or its queued message.
SELECT * FROM openai_responses
WHERE chat_id = @chat_id
  AND (message_id = sqlc.narg(message_id) OR queued_message_id = sqlc.narg(queued_message_id))
ORDER BY created_at LIMIT 1;

-- name: OpenAIResponseGet :one
SELECT * FROM openai_responses WHERE id = @id;

-- name: OpenAIResponseCancel :one
UPDATE openai_responses SET cancelled_at = coalesce(cancelled_at, now())
WHERE id = @id
RETURNING *;

-- name: OpenAIResponseSetMessage :exec
-- A queued response's message, once its queued message was promoted.
UPDATE openai_responses SET message_id = @message_id WHERE id = @id AND message_id IS NULL;

-- name: OpenAIPromotedMessage :one
SELECT id FROM chat_messages
WHERE chat_id = @chat_id AND queued_message_id = @queued_message_id AND NOT deleted
ORDER BY id LIMIT 1;

-- name: OpenAIResponseDelete :exec
DELETE FROM openai_responses WHERE id = @id;

-- name: OpenAIConversationInsert :exec
INSERT INTO openai_conversations (chat_id, metadata) VALUES (@chat_id, @metadata);

-- name: OpenAIConversationMetadata :one
SELECT metadata FROM openai_conversations WHERE chat_id = @chat_id;

-- name: OpenAIResponseByKey :one
-- The caller's latest response created with an Idempotency-Key.
SELECT * FROM openai_responses
WHERE organization_id = @organization_id AND owner_id = @owner_id AND idempotency_key = @idempotency_key
ORDER BY created_at DESC LIMIT 1;

-- name: OpenAIConversationSetMetadata :exec
-- A conversation's metadata, replaced whole (a chat created outside /v1
-- has no row yet).
INSERT INTO openai_conversations (chat_id, metadata) VALUES (@chat_id, @metadata)
ON CONFLICT (chat_id) DO UPDATE SET metadata = EXCLUDED.metadata;
