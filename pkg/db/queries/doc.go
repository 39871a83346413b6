// Package queries is chatd's typed access to Postgres: sqlc generates a
// method per statement of the .sql files in this folder (one file per
// table or concern, named table-then-verb) into the .sql.go files beside
// them, and Pipeline (pipelines.go, written by hand) sends several of them
// in one round trip. Regenerate with make sqlc; never edit the generated
// files.
package queries
