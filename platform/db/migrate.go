package db

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/uptrace/bun/migrate"
)

// migrationLockID is the advisory lock that serializes every migrator.
const migrationLockID = 0x5356_4d49_4752 // "SVMIGR"

// MigrationSet is every migration of the service, applied in name order and
// recorded in one history (bun_migrations): the SQL files of FS
// (NNNN_name.up.sql; .tx.up.sql runs in a transaction) and the steps of
// River's own schema.
type MigrationSet struct {
	FS    fs.FS
	River []RiverStep
}

// RiverStep is a point in the history where River's own schema moves: svc
// migrate runs River's migrations (rivermigrate, one transaction per River
// version, each recorded in river_migration too) up to Version, there and
// not before, and records the step under Name like a SQL migration. An
// upgrade of River that brings a new schema version adds a step.
type RiverStep struct {
	Name    string // its number among the SQL migrations ("0016")
	Comment string // what it is ("river_schema")
	Version int    // River's schema version it migrates up to
}

// migrations discovers the SQL files and adds the River steps.
func (s MigrationSet) migrations(d *DB, log *slog.Logger) (*migrate.Migrations, error) {
	ms := migrate.NewMigrations()
	if err := ms.Discover(s.FS); err != nil {
		return nil, fmt.Errorf("migrations: discover: %w", err)
	}
	for _, st := range s.River {
		if slices.ContainsFunc(ms.Sorted(), func(m migrate.Migration) bool { return m.Name == st.Name }) {
			return nil, fmt.Errorf("migrations: river step %s_%s has the number of another migration", st.Name, st.Comment)
		}
		ms.Add(migrate.Migration{
			Name:    st.Name,
			Comment: st.Comment,
			Up: func(ctx context.Context, _ *migrate.Migrator, _ *migrate.Migration) error {
				return migrateRiver(ctx, d, st.Version, log)
			},
		})
	}
	return ms, nil
}

// migrateRiver applies River's migrations up to version. A version already
// applied is skipped, so a step that failed half-way runs again cleanly.
func migrateRiver(ctx context.Context, d *DB, version int, log *slog.Logger) error {
	rm, err := rivermigrate.New(riverpgxv5.New(d.Pool), nil)
	if err != nil {
		return fmt.Errorf("river: %w", err)
	}
	res, err := rm.Migrate(ctx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{TargetVersion: version})
	if err != nil {
		return fmt.Errorf("river: %w", err)
	}
	for _, v := range res.Versions {
		log.Info("applied river migration", "version", v.Version)
	}
	return nil
}

// Migrate applies the migrations of set that the database has not applied,
// in name order. It holds a session advisory lock for the whole run, so two
// processes migrating at once take turns instead of failing, and it is
// idempotent: applied migrations are skipped. A migration is recorded only
// once it has succeeded: one that fails (a refused precondition, a lost
// connection) is still pending, and the next run tries it again.
func Migrate(ctx context.Context, d *DB, set MigrationSet, log *slog.Logger) error {
	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	if err := takeMigrationLock(ctx, conn); err != nil {
		return err
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrationLockID)
	}()

	ms, err := set.migrations(d, log)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
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

// migrationLockPoll is how often a migrator waiting for another's run
// asks for the lock again.
const migrationLockPoll = 200 * time.Millisecond

// takeMigrationLock takes the migrators' session advisory lock on conn,
// asking again every migrationLockPoll until it is free. It does not wait
// in pg_advisory_lock: a statement waiting there holds a snapshot, and a
// CREATE INDEX CONCURRENTLY of the run holding the lock (on another
// connection) waits for every older snapshot to end, so the two would
// wait for each other for ever, a cycle PostgreSQL cannot see (the lock's
// holder is an idle connection). Each try is a statement of its own whose
// snapshot ends with it.
func takeMigrationLock(ctx context.Context, conn *pgxpool.Conn) error {
	for {
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", migrationLockID).Scan(&got); err != nil {
			return fmt.Errorf("migrate: take lock: %w", err)
		}
		if got {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("migrate: wait for another migrator: %w", ctx.Err())
		case <-time.After(migrationLockPoll):
		}
	}
}

// Pending returns the names of the migrations of set that the database has
// not applied, in order; every one when it has never been migrated. The api
// and the worker refuse to start while any is pending, and /readyz reports
// it.
func Pending(ctx context.Context, d *DB, set MigrationSet) ([]string, error) {
	ms, err := set.migrations(d, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
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
func RequireMigrated(ctx context.Context, d *DB, set MigrationSet) error {
	pending, err := Pending(ctx, d, set)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		return notMigrated(pending)
	}
	return nil
}
