-- name: ProjectInsert :one
INSERT INTO chat_projects (id, organization_id, owner_id, name, created_at)
VALUES (@id, @organization_id, @owner_id, @name, @now)
RETURNING *;

-- name: ProjectGet :one
SELECT * FROM chat_projects WHERE id = @id;

-- name: ProjectListByOwner :many
-- Oldest first, keyset-paginated on (created_at, id).
SELECT * FROM chat_projects
WHERE owner_id = @owner_id AND organization_id = @organization_id
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) > (sqlc.narg(after_created_at)::timestamptz, sqlc.narg(after_id)::uuid))
ORDER BY created_at, id
LIMIT @page_limit;
