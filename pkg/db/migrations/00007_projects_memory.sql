-- +goose Up
-- Projects group root chats that share durable memory (spec "Project
-- memory"). A project belongs to one user in one organization, like the
-- chats put in it; a chat joins a project when it is created and only root
-- chats do (subagents have no project and no memory).
CREATE TABLE chat_projects (
    id uuid PRIMARY KEY,
    organization_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    owner_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (organization_id, owner_id, name)
);

ALTER TABLE chats ADD COLUMN project_id uuid REFERENCES chat_projects (id) ON DELETE SET NULL;
ALTER TABLE chats ADD CONSTRAINT chats_project_root_check CHECK (project_id IS NULL OR parent_chat_id IS NULL);
CREATE INDEX chats_project_idx ON chats (project_id) WHERE project_id IS NOT NULL;

-- A project's memories, one row per name. Writes take the project's
-- advisory lock (pkg/db/queries memory.sql), which is what keeps a project
-- at most 200 memories; the table itself does not count.
CREATE TABLE chat_project_memories (
    project_id uuid NOT NULL REFERENCES chat_projects (id) ON DELETE CASCADE,
    name text NOT NULL,
    title text NOT NULL DEFAULT '',
    content text NOT NULL,
    -- The chat whose agent last wrote the memory (kept when it is deleted).
    updated_by_chat_id uuid,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, name)
);

-- +goose Down
DROP TABLE chat_project_memories;
DROP INDEX chats_project_idx;
ALTER TABLE chats DROP CONSTRAINT chats_project_root_check;
ALTER TABLE chats DROP COLUMN project_id;
DROP TABLE chat_projects;
