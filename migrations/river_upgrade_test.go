package migrations_test

import (
	"context"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/migrations"
	"svc/modules/event"
	"svc/modules/ingress"
	"svc/platform/db"
	"svc/platform/dbtest"
	"svc/platform/queue"
	"svc/platform/queue/queuetest"
)

// TestRiverStepsAreCurrent: the last River step migrates to the newest
// schema version the linked River knows, so an upgrade of River that
// brings a new version cannot land without the step that applies it.
func TestRiverStepsAreCurrent(t *testing.T) {
	t.Parallel()
	rm, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	require.NoError(t, err)
	all := rm.AllVersions()
	require.NotEmpty(t, migrations.River)
	last := migrations.River[len(migrations.River)-1]
	require.Equal(t, all[len(all)-1].Version, last.Version,
		"River ships schema version %d: add a River step that migrates to it", all[len(all)-1].Version)
	for i := 1; i < len(migrations.River); i++ {
		require.Greater(t, migrations.River[i].Name, migrations.River[i-1].Name)
		require.Greater(t, migrations.River[i].Version, migrations.River[i-1].Version)
	}
}

// recorder is a worker that records the jobs it works.
type recorder[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	mu   sync.Mutex
	done map[int64]T
}

func (w *recorder[T]) Work(_ context.Context, job *river.Job[T]) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done[job.ID] = job.Args
	return nil
}

func (w *recorder[T]) worked() map[int64]T {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.done)
}

// TestUpgradeFromRiverV041: a database as the releases on River v0.41 left
// it (River's schema at version 7, applied before the service's own
// migrations 0001 to 0015, and jobs written by River v0.41 in it) has step
// 0016 pending, so svc api and svc worker refuse it until svc migrate has
// run; svc migrate then brings River's schema to version 8 and records the
// step, and every job is still there: the live ones are worked by the
// current River, and the deliveries it would queue again are taken for
// duplicates of the old ones (their unique keys did not change).
func TestUpgradeFromRiverV041(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	d, err := db.Open(ctx, dbtest.NewEmptyURL(t), 10)
	require.NoError(t, err)
	t.Cleanup(d.Close)

	// svc migrate as it was: River to its newest version (7 on v0.41),
	// then the SQL migrations, 0001 to 0015.
	rm, err := rivermigrate.New(riverpgxv5.New(d.Pool), nil)
	require.NoError(t, err)
	_, err = rm.Migrate(ctx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{TargetVersion: 7})
	require.NoError(t, err)
	require.NoError(t, db.Migrate(ctx, d, db.MigrationSet{FS: sqlBefore(t, "0016")}, log))
	fixture, err := os.ReadFile("testdata/river_v0.41_jobs.sql")
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, string(fixture))
	require.NoError(t, err)
	before := jobStates(t, d)
	require.Len(t, before, 4)

	pending, err := db.Pending(ctx, d, migrations.Set)
	require.NoError(t, err)
	// 0016 first, then whatever later migrations this build has.
	require.NotEmpty(t, pending)
	require.Equal(t, "0016", pending[0], "the api and the worker refuse the database until it is migrated")

	require.NoError(t, db.Migrate(ctx, d, migrations.Set, log))
	require.NoError(t, db.RequireMigrated(ctx, d, migrations.Set))
	var riverVersion int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT max(version) FROM river_migration").Scan(&riverVersion))
	require.Equal(t, 8, riverVersion)
	var step int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM bun_migrations WHERE name = '0016'").Scan(&step))
	require.Equal(t, 1, step, "the River step is in the migration history")
	require.Equal(t, before, jobStates(t, d), "the upgrade leaves the jobs as they were")

	// The same deliveries queued again by the current River are duplicates
	// of the live ones v0.41 inserted; a new one is not.
	ins, err := queue.NewInserter(d.SQL, log)
	require.NoError(t, err)
	insert := func(args event.DeliverArgs) bool {
		var dup bool
		require.NoError(t, d.Bun.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			res, err := ins.InsertTx(ctx, tx.Tx, args, nil)
			if err == nil {
				dup = res.UniqueSkippedAsDuplicate
			}
			return err
		}))
		return dup
	}
	first := uuid.MustParse("0193a1b2-0000-7000-8000-00000000e001")
	second := uuid.MustParse("0193a1b2-0000-7000-8000-00000000e002")
	require.True(t, insert(event.DeliverArgs{EventID: first, Attempt: 1}), "an available v0.41 job")
	require.True(t, insert(event.DeliverArgs{EventID: second, Attempt: 2, Cycle: 1}), "a scheduled v0.41 job")
	require.False(t, insert(event.DeliverArgs{EventID: first, Attempt: 2}), "another attempt is another job")

	// The current River works the old jobs: the available one, the
	// scheduled one once the leader has made it available, the retryable
	// one; the completed one stays as it was.
	deliveries := &recorder[event.DeliverArgs]{done: map[int64]event.DeliverArgs{}}
	webhooks := &recorder[ingress.ProcessArgs]{done: map[int64]ingress.ProcessArgs{}}
	workers := river.NewWorkers()
	river.AddWorker(workers, deliveries)
	river.AddWorker(workers, webhooks)
	w, err := queue.NewWorker(d.Pool, queue.WorkerParams{Workers: workers, Log: log, FetchPollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	queuetest.Start(t, w, 5*time.Second)
	require.Len(t, jobStates(t, d), 5, "the duplicates inserted nothing")
	allCompleted := func() bool {
		for _, s := range jobStates(t, d) {
			if s != "completed" {
				return false
			}
		}
		return true
	}
	require.Eventually(t, allCompleted, 30*time.Second, 100*time.Millisecond, "every live job is worked")
	require.Equal(t, event.DeliverArgs{EventID: first, Attempt: 1}, deliveries.worked()[1])
	require.Equal(t, event.DeliverArgs{EventID: second, Attempt: 2, Cycle: 1}, deliveries.worked()[2])
	require.Equal(t, ingress.ProcessArgs{DeliveryID: 42}, webhooks.worked()[4])
	require.NotContains(t, webhooks.worked(), int64(3), "a completed job is not worked again")
	var attempt int
	var errs []string
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT attempt, array(SELECT e->>'error' FROM unnest(errors) e) FROM river_job WHERE id = 4").Scan(&attempt, &errs))
	require.Equal(t, 2, attempt, "the retry counts on from v0.41's attempt")
	require.Equal(t, []string{"processor unreachable"}, errs, "v0.41's attempt error is kept")
}

// migratedBefore opens a fresh database with the SQL migrations named
// before name applied, and every River step; migrateAll applies the rest.
func migratedBefore(t *testing.T, name string) *db.DB {
	t.Helper()
	ctx := context.Background()
	d, err := db.Open(ctx, dbtest.NewEmptyURL(t), 4)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	require.NoError(t, db.Migrate(ctx, d, db.MigrationSet{FS: sqlBefore(t, name), River: migrations.River}, slog.New(slog.DiscardHandler)))
	return d
}

// migrateAll applies every migration d has not applied.
func migrateAll(t *testing.T, d *db.DB) {
	t.Helper()
	require.NoError(t, db.Migrate(context.Background(), d, migrations.Set, slog.New(slog.DiscardHandler)))
}

// sqlBefore returns the SQL migrations named before name.
func sqlBefore(t *testing.T, name string) fs.FS {
	t.Helper()
	out := fstest.MapFS{}
	entries, err := fs.ReadDir(migrations.FS, ".")
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") && e.Name() < name {
			b, err := fs.ReadFile(migrations.FS, e.Name())
			require.NoError(t, err)
			out[e.Name()] = &fstest.MapFile{Data: b}
		}
	}
	require.NotEmpty(t, out)
	return out
}

// jobStates returns every job's state by id.
func jobStates(t *testing.T, d *db.DB) map[int64]string {
	t.Helper()
	rows, err := d.Pool.Query(context.Background(), "SELECT id, state FROM river_job ORDER BY id")
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var state string
		require.NoError(t, rows.Scan(&id, &state))
		out[id] = state
	}
	require.NoError(t, rows.Err())
	return out
}
