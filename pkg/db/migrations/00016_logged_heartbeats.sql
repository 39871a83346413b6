-- +goose Up
-- Leases and the worker registry survive a failover. Unlogged, both tables
-- were empty on a promoted standby (unlogged tables are not replicated):
-- every running chat looked ownerless at once, the acquisition passes took
-- all of them over and called their models again while the workers that
-- held them were alive and still streaming, and the relays could not find
-- any worker until its next registration. Logged, a synchronous standby
-- holds every renewal it acknowledged. The cost is WAL: about 340 bytes per
-- running chat per heartbeat tick (docs/benchmarks.md,
-- BenchmarkHeartbeatPersistence). SET LOGGED rewrites each table under an
-- exclusive lock; both hold one row per running chat or live worker.
ALTER TABLE chat_heartbeats SET LOGGED;
ALTER TABLE chat_workers SET LOGGED;

-- +goose Down
ALTER TABLE chat_workers SET UNLOGGED;
ALTER TABLE chat_heartbeats SET UNLOGGED;
