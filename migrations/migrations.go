// Package migrations holds the service's migrations, applied in name order
// by svc migrate (platform/db.Migrate) and recorded in one history: the SQL
// files (NNNN_name.tx.up.sql) and, at their place among them, the steps of
// River's own schema (River). A migration is never edited once it has
// landed: fix forward with a new one.
package migrations

import (
	"embed"

	"svc/platform/db"
)

// FS holds every SQL migration file.
//
//go:embed *.sql
var FS embed.FS

// River are the points where River's schema moves. River's versions 1 to 7
// were applied before the service's own migrations by the releases on River
// v0.41, which recorded them only in river_migration; 0016 brings River to
// version 8, the schema of v0.51 (on PostgreSQL a no-op: it only records
// the version), and on a new database creates River's whole schema there.
// Upgrading River to a release with a new schema version adds a step here
// (TestRiverStepsAreCurrent fails until it does).
var River = []db.RiverStep{
	{Name: "0016", Comment: "river_schema", Version: 8},
}

// Set is every migration: svc migrate applies it, and svc api and svc
// worker refuse to start while any of it is pending.
var Set = db.MigrationSet{FS: FS, River: River}
