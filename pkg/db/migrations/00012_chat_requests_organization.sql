-- +goose Up
-- A request_id is the caller's within one organization: the same user in
-- two organizations holds two independent sets of request IDs, so
-- repeating an organization's create with another organization's token
-- acts anew instead of answering with the first organization's chat.
-- Existing rows take their chat's organization.
ALTER TABLE chat_requests ADD COLUMN organization_id uuid REFERENCES organizations (id) ON DELETE CASCADE;
UPDATE chat_requests r SET organization_id = c.organization_id FROM chats c WHERE c.id = r.chat_id;
ALTER TABLE chat_requests ALTER COLUMN organization_id SET NOT NULL;
ALTER TABLE chat_requests DROP CONSTRAINT chat_requests_pkey;
ALTER TABLE chat_requests ADD CONSTRAINT chat_requests_pkey PRIMARY KEY (organization_id, owner_id, kind, request_id);

-- +goose Down
ALTER TABLE chat_requests DROP CONSTRAINT chat_requests_pkey;
DELETE FROM chat_requests r USING chat_requests o
WHERE r.owner_id = o.owner_id AND r.kind = o.kind AND r.request_id = o.request_id
  AND (r.created_at, r.organization_id) > (o.created_at, o.organization_id);
ALTER TABLE chat_requests ADD CONSTRAINT chat_requests_pkey PRIMARY KEY (owner_id, kind, request_id);
ALTER TABLE chat_requests DROP COLUMN organization_id;
