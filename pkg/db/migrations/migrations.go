// Package migrations holds chatd's numbered SQL migrations, embedded in every
// binary so a deployment can migrate without the source tree.
package migrations

import "embed"

// FS holds the goose migration files (NNNNN_name.sql).
//
//go:embed *.sql
var FS embed.FS
