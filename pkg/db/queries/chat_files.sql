-- name: ChatFileInsert :one
INSERT INTO chat_files (id, organization_id, owner_id, name, media_type, size, data)
VALUES (@id, @organization_id, @owner_id, @name, @media_type, @size, @data)
RETURNING id, organization_id, owner_id, chat_id, name, media_type, size, created_at, linked_at;

-- name: ChatFileGet :one
-- Metadata only: the bytes are read by ChatFileData.
SELECT id, organization_id, owner_id, chat_id, name, media_type, size, created_at, linked_at
FROM chat_files WHERE id = @id;

-- name: ChatFileData :one
SELECT data FROM chat_files WHERE id = @id AND chat_id = @chat_id;

-- name: ChatFileDataForOwner :one
SELECT data FROM chat_files WHERE id = @id AND owner_id = @owner_id AND organization_id = @organization_id;

-- name: ChatFilesLockForLink :many
-- The files a message references, locked so that two transitions cannot
-- link one file to two chats.
SELECT id, organization_id, owner_id, chat_id, name, media_type, size, created_at, linked_at
FROM chat_files WHERE id = ANY(@ids::uuid[])
ORDER BY id
FOR UPDATE;

-- name: ChatFilesOfChat :many
-- A chat's files, earliest upload first (the eviction order).
SELECT id, created_at FROM chat_files WHERE chat_id = @chat_id ORDER BY created_at, id;

-- name: ChatFilesLink :exec
UPDATE chat_files SET chat_id = @chat_id, linked_at = @linked_at
WHERE id = ANY(@ids::uuid[]) AND chat_id IS NULL;

-- name: ChatFilesEvict :exec
DELETE FROM chat_files WHERE chat_id = @chat_id AND id = ANY(@ids::uuid[]);

-- name: ChatFilesPresent :many
-- Which of ids still exist on the chat (evicted files are gone).
SELECT id FROM chat_files WHERE chat_id = @chat_id AND id = ANY(@ids::uuid[]);
