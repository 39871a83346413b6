-- name: ChatAutoArchiveCandidates :many
-- The auto-archive loop's candidates (spec "Auto-archive loop"), read without
-- locks: root chats that are not archived, waiting or in error (W, E0, E1),
-- created before the cutoff, whose whole family has been idle since the
-- cutoff. A family is idle when no member is running, interrupting or
-- requires_action and no member has a non-deleted message created at or
-- after it. Only messages count as activity (the spec): a family unarchived
-- without a new message is archived again on the next tick.
-- Keyset-paginated on id after @after_id; a non-null @root_id restricts the
-- read to that one root (the loop's recheck just before it archives).
SELECT r.id
FROM chats r
WHERE r.parent_chat_id IS NULL
  AND NOT r.archived
  AND r.status IN ('waiting', 'error')
  AND r.created_at < @cutoff
  AND r.id > @after_id
  AND (sqlc.narg(root_id)::uuid IS NULL OR r.id = sqlc.narg(root_id)::uuid)
  AND NOT EXISTS (
      SELECT 1 FROM chats m
      WHERE m.root_chat_id = r.id
        AND m.status IN ('running', 'interrupting', 'requires_action')
  )
  AND NOT EXISTS (
      SELECT 1 FROM chat_messages msg
      WHERE msg.chat_id = r.id AND NOT msg.deleted AND msg.created_at >= @cutoff
  )
  AND NOT EXISTS (
      SELECT 1 FROM chat_messages msg
      JOIN chats m ON m.id = msg.chat_id
      WHERE m.root_chat_id = r.id AND NOT msg.deleted AND msg.created_at >= @cutoff
  )
ORDER BY r.id
LIMIT @batch_size;
