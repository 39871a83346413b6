-- name: MemoryLockProject :exec
-- Serializes a project's memory writes until the transaction ends (spec
-- "Project memory": saves and deletes take a per-project advisory lock).
-- The key comes from memory.LockKey (services/worker/internal/memory).
SELECT pg_advisory_xact_lock(@key::bigint);

-- name: MemoryIndex :many
-- The live index: every memory's name and title, by name.
SELECT name, title, updated_at FROM chat_project_memories
WHERE project_id = @project_id
ORDER BY name;

-- name: MemoryGet :one
SELECT * FROM chat_project_memories WHERE project_id = @project_id AND name = @name;

-- name: MemoryCount :one
SELECT count(*) FROM chat_project_memories WHERE project_id = @project_id;

-- name: MemoryUpsert :one
-- created is true when the name was new.
INSERT INTO chat_project_memories (project_id, name, title, content, updated_by_chat_id, created_at, updated_at)
VALUES (@project_id, @name, @title, @content, @chat_id, @now, @now)
ON CONFLICT (project_id, name) DO UPDATE
SET title = EXCLUDED.title, content = EXCLUDED.content,
    updated_by_chat_id = EXCLUDED.updated_by_chat_id, updated_at = EXCLUDED.updated_at
RETURNING (xmax = 0)::boolean AS created;

-- name: MemoryDelete :execrows
DELETE FROM chat_project_memories WHERE project_id = @project_id AND name = @name;
