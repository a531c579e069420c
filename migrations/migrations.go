// Package migrations embeds the service's SQL migrations, applied in name
// order by svc migrate (platform/db.Migrate). Files are NNNN_name.tx.up.sql;
// a migration is never edited once it has landed: fix forward with a new one.
package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS
