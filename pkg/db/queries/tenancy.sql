-- name: OrganizationEnsure :exec
INSERT INTO organizations (id, name) VALUES (@id, @name) ON CONFLICT (id) DO NOTHING;

-- name: UserEnsure :exec
INSERT INTO users (id, name) VALUES (@id, @name) ON CONFLICT (id) DO NOTHING;

-- name: OrganizationMemberEnsure :exec
INSERT INTO organization_members (organization_id, user_id) VALUES (@organization_id, @user_id)
ON CONFLICT DO NOTHING;
