-- +goose Up
-- The scripted model is the default of a fresh install (DESIGN.md, "The
-- scripted model"): a deployment-wide `scripted` provider with a well-known ID
-- (modelconfig.ScriptedProviderID), and a default `scripted` model config for
-- every organization.
--
-- The per-organization config is inserted by an AFTER INSERT trigger on
-- organizations rather than by Go code, so every path that creates an
-- organization gets it (the API's OrganizationEnsure, tests, psql, future
-- admin tools) and it lands in the same transaction as the organization row.
-- The trigger follows the model-config write protocol of pkg/modelconfig:
-- provider row lock (FOR KEY SHARE) first, then the organization's advisory
-- lock, then the write. Holding the advisory lock until the organization's
-- transaction commits makes a concurrent model-config write for the new
-- organization wait and then see this default, instead of also electing one.
-- If the scripted provider has been deleted, new organizations start with no
-- model config.

INSERT INTO chat_providers (id, provider_type, display_name, enabled)
VALUES ('00000000-0000-4000-8000-000000000001', 'scripted', 'Scripted', true)
ON CONFLICT (id) DO NOTHING;

-- chat_model_config_lock_key is the advisory lock key that serializes an
-- organization's model-config writes. It must equal
-- modelconfig.OrganizationLockKey (a test checks): the XOR of the UUID's two
-- big-endian 64-bit halves and the namespace 0x636861746d636667 ("chatmcfg"),
-- read as a signed bigint.
-- +goose StatementBegin
CREATE FUNCTION chat_model_config_lock_key(org uuid)
RETURNS bigint
LANGUAGE sql
IMMUTABLE STRICT PARALLEL SAFE
AS $$
  SELECT (
    ('x' || substr(h, 1, 16))::bit(64)
    # ('x' || substr(h, 17, 16))::bit(64)
    # x'636861746d636667'
  )::bigint
  FROM (SELECT replace(org::text, '-', '') AS h) AS s
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION insert_default_scripted_model_config()
RETURNS trigger AS $$
BEGIN
  PERFORM 1 FROM chat_providers
  WHERE id = '00000000-0000-4000-8000-000000000001'
  FOR KEY SHARE;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;

  PERFORM pg_advisory_xact_lock(chat_model_config_lock_key(NEW.id));

  INSERT INTO chat_model_configs
    (id, organization_id, provider_id, model, display_name, enabled, is_default, context_limit)
  SELECT
    gen_random_uuid(), NEW.id, '00000000-0000-4000-8000-000000000001', 'scripted',
    'Scripted (deterministic test model)', true, true, 128000
  WHERE NOT EXISTS (
    SELECT 1 FROM chat_model_configs
    WHERE organization_id = NEW.id AND is_default AND NOT deleted
  );
  RETURN NULL;
END;
$$ LANGUAGE plpgsql;
-- +goose StatementEnd

CREATE TRIGGER trigger_insert_default_scripted_model_config
AFTER INSERT ON organizations
FOR EACH ROW
EXECUTE FUNCTION insert_default_scripted_model_config();

-- Organizations that exist already and have no live model config get the
-- default too, so an upgraded deployment matches a fresh one.
INSERT INTO chat_model_configs
  (id, organization_id, provider_id, model, display_name, enabled, is_default, context_limit)
SELECT
  gen_random_uuid(), o.id, '00000000-0000-4000-8000-000000000001', 'scripted',
  'Scripted (deterministic test model)', true, true, 128000
FROM organizations o
WHERE NOT EXISTS (
  SELECT 1 FROM chat_model_configs c WHERE c.organization_id = o.id AND NOT c.deleted
);

-- +goose Down
DROP TRIGGER trigger_insert_default_scripted_model_config ON organizations;
DROP FUNCTION insert_default_scripted_model_config();
DROP FUNCTION chat_model_config_lock_key(uuid);

-- Removing the provider cascades to every config that uses it. Organizations
-- left with live configs but no default elect one by the rule of
-- pkg/modelconfig: an enabled config of an enabled provider first, then any
-- live config; oldest created_at, then lowest id.
DELETE FROM chat_providers WHERE id = '00000000-0000-4000-8000-000000000001';

UPDATE chat_model_configs SET is_default = true, updated_at = now()
WHERE id IN (
  SELECT DISTINCT ON (c.organization_id) c.id
  FROM chat_model_configs c
  JOIN chat_providers p ON p.id = c.provider_id
  WHERE NOT c.deleted
    AND NOT EXISTS (
      SELECT 1 FROM chat_model_configs d
      WHERE d.organization_id = c.organization_id AND d.is_default AND NOT d.deleted
    )
  ORDER BY c.organization_id, (c.enabled AND p.enabled) DESC, c.created_at, c.id
);
