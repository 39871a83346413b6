-- name: ChatQueuedMessageInsert :one
-- Appends at the tail.
INSERT INTO chat_queued_messages (chat_id, content, model_config_id, reasoning_effort, position, created_by, created_at, turn_id)
VALUES (
    @chat_id, @content, @model_config_id, @reasoning_effort,
    COALESCE((SELECT max(q.position) FROM chat_queued_messages q WHERE q.chat_id = @chat_id), 0) + 1,
    @created_by, @created_at, @turn_id
)
RETURNING *;

-- name: ChatQueuedMessageList :many
SELECT * FROM chat_queued_messages WHERE chat_id = @chat_id ORDER BY position, id;

-- name: ChatQueuedMessageListIfChanged :many
-- ChatQueuedMessageList when the chat's queue_version is past
-- @seen_version, and no row otherwise: a stream's read sends it with the
-- chat's own read, in the same snapshot, before it knows the version.
SELECT q.* FROM chat_queued_messages q
WHERE q.chat_id = @chat_id
  AND EXISTS (SELECT 1 FROM chats c WHERE c.id = @chat_id AND c.queue_version > @seen_version)
ORDER BY q.position, q.id;

-- name: ChatQueuedMessageHead :one
SELECT * FROM chat_queued_messages WHERE chat_id = @chat_id ORDER BY position, id LIMIT 1;

-- name: ChatQueuedMessageGet :one
SELECT * FROM chat_queued_messages WHERE chat_id = @chat_id AND id = @id;

-- name: ChatQueuedMessageDelete :execrows
DELETE FROM chat_queued_messages WHERE chat_id = @chat_id AND id = @id;

-- name: ChatQueuedMessageDeleteAll :execrows
DELETE FROM chat_queued_messages WHERE chat_id = @chat_id;

-- name: ChatQueuedMessageMoveToHead :execrows
-- Reorders one queued message in front of every other.
UPDATE chat_queued_messages
SET position = (SELECT min(q.position) FROM chat_queued_messages q WHERE q.chat_id = @chat_id) - 1
WHERE chat_queued_messages.chat_id = @chat_id AND chat_queued_messages.id = @id;
