-- name: ChatListChildren :many
-- A chat's subagents (its direct children), oldest first.
SELECT * FROM chats WHERE parent_chat_id = @parent_chat_id ORDER BY created_at, id;

-- name: ChatLastAssistantMessage :one
-- The newest active assistant message of a chat: a subagent's reply.
SELECT * FROM chat_messages
WHERE chat_id = @chat_id AND role = 'assistant' AND NOT deleted
ORDER BY id DESC
LIMIT 1;
