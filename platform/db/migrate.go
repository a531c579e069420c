package db

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/uptrace/bun/migrate"
)

// migrationLockID is the advisory lock that serializes every migrator.
const migrationLockID = 0x5356_4d49_4752 // "SVMIGR"

// Migrate applies River's migrations and then the service's own SQL
// migrations from fsys (files NNNN_name.up.sql; .tx.up.sql runs in a
// transaction). It holds a session advisory lock for the whole run, so two
// processes migrating at once take turns instead of failing, and it is
// idempotent: applied migrations are skipped. A migration is recorded only
// once it has succeeded: one that fails (a refused precondition, a lost
// connection) is still pending, and the next run tries it again.
func Migrate(ctx context.Context, d *DB, fsys fs.FS, log *slog.Logger) error {
	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLockID); err != nil {
		return fmt.Errorf("migrate: take lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrationLockID)
	}()

	rm, err := rivermigrate.New(riverpgxv5.New(d.Pool), nil)
	if err != nil {
		return fmt.Errorf("migrate: river: %w", err)
	}
	res, err := rm.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("migrate: river: %w", err)
	}
	for _, v := range res.Versions {
		log.Info("applied river migration", "version", v.Version)
	}

	ms := migrate.NewMigrations()
	if err := ms.Discover(fsys); err != nil {
		return fmt.Errorf("migrate: discover: %w", err)
	}
	// bun records a migration before running it unless told otherwise: a
	// migration that failed would be taken for applied by every later run.
	m := migrate.NewMigrator(d.Bun, ms, migrate.WithMarkAppliedOnSuccess(true))
	if err := m.Init(ctx); err != nil {
		return fmt.Errorf("migrate: init: %w", err)
	}
	group, err := m.Migrate(ctx)
	for _, mg := range group.Migrations {
		if mg.IsApplied() {
			log.Info("applied migration", "name", mg.String())
		}
	}
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// Pending returns the names of the service's migrations in fsys that the
// database has not applied, in order; every one when it has never been
// migrated. The api and the worker refuse to start while any is pending,
// and /readyz reports it.
func Pending(ctx context.Context, d *DB, fsys fs.FS) ([]string, error) {
	ms := migrate.NewMigrations()
	if err := ms.Discover(fsys); err != nil {
		return nil, fmt.Errorf("migrations: discover: %w", err)
	}
	var exists bool
	if err := d.Bun.NewRaw("SELECT to_regclass('bun_migrations') IS NOT NULL").Scan(ctx, &exists); err != nil {
		return nil, fmt.Errorf("migrations: read applied: %w", err)
	}
	var names []string
	if !exists {
		for _, m := range ms.Sorted() {
			names = append(names, m.Name)
		}
		return names, nil
	}
	all, err := migrate.NewMigrator(d.Bun, ms).MigrationsWithStatus(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: read applied: %w", err)
	}
	for _, m := range all.Unapplied() {
		names = append(names, m.Name)
	}
	return names, nil
}

// notMigrated says what is missing and what to do.
func notMigrated(pending []string) error {
	return fmt.Errorf("the database is not migrated: %d migration(s) not applied (the first: %s); run `svc migrate`", len(pending), pending[0])
}

// RequireMigrated fails with a clear error when any migration is pending.
func RequireMigrated(ctx context.Context, d *DB, fsys fs.FS) error {
	pending, err := Pending(ctx, d, fsys)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		return notMigrated(pending)
	}
	return nil
}
