-- name: ChatHeartbeatGet :one
SELECT * FROM chat_heartbeats WHERE chat_id = @chat_id AND runner_id = @runner_id;
