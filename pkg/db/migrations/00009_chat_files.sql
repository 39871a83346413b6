-- +goose Up
-- Uploaded files (attachments). A file is uploaded by a user of an
-- organization and is unlinked until a transition persists a message that
-- references it; then chat_id links it to that chat, which it belongs to
-- for good (spec "What constitutes a chat's state?", file links). Evicting a
-- file deletes its row: messages keep the dangling file_id, and prompts
-- show an expired placeholder instead.
CREATE TABLE chat_files (
    id uuid PRIMARY KEY,
    organization_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    owner_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    chat_id uuid REFERENCES chats (id) ON DELETE CASCADE,
    name text NOT NULL,
    media_type text NOT NULL,
    size bigint NOT NULL,
    data bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    linked_at timestamptz,
    CONSTRAINT chat_files_linked_check CHECK ((chat_id IS NULL) = (linked_at IS NULL))
);

-- Eviction takes a chat's earliest uploads first.
CREATE INDEX chat_files_chat_created_idx ON chat_files (chat_id, created_at, id) WHERE chat_id IS NOT NULL;

-- +goose Down
DROP TABLE chat_files;
