-- name: ProjectInsert :one
INSERT INTO chat_projects (id, organization_id, owner_id, name, created_at)
VALUES (@id, @organization_id, @owner_id, @name, @now)
RETURNING *;

-- name: ProjectGet :one
SELECT * FROM chat_projects WHERE id = @id;

-- name: ProjectListByOwner :many
-- Oldest first: a user has few projects, so there is no pagination.
SELECT * FROM chat_projects
WHERE owner_id = @owner_id AND organization_id = @organization_id
ORDER BY created_at, id;
