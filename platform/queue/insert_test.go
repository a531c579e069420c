package queue_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/dbtest"
	"svc/platform/queue"
)

// insertArgs is a job as the service's are: an id or two.
type insertArgs struct {
	DeliveryID int64  `json:"delivery_id"`
	Note       string `json:"note"`
}

func (insertArgs) Kind() string { return "insert_bench" }

// TestInsertTxRoundTrips inserts jobs through the insert-only client over
// db.Open's pool, as every module does, and reads back every column River
// sends as an array (db's driver sends those arrays as text): the job as
// inserted, a scheduled one, and a unique one whose second insert River
// skips by its unique key and states.
func TestInsertTxRoundTrips(t *testing.T) {
	d := dbtest.New(t)
	ctx := context.Background()
	ins, err := queue.NewInserter(d.SQL, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456000, time.UTC)
	insert := func(args insertArgs, opts *river.InsertOpts) (id int64, skipped bool) {
		t.Helper()
		err := db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
			res, err := ins.InsertTx(ctx, tx.Tx, args, opts)
			if err == nil {
				id, skipped = res.Job.ID, res.UniqueSkippedAsDuplicate
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return id, skipped
	}
	plain, _ := insert(insertArgs{DeliveryID: 7, Note: `quote " backslash \ brace } comma ,`}, &river.InsertOpts{
		Queue: "q1", Priority: 3, MaxAttempts: 4, Tags: []string{"a-b", "c_d"}, Metadata: []byte(`{"m": [1, "x"]}`)})
	later, _ := insert(insertArgs{DeliveryID: 8}, &river.InsertOpts{ScheduledAt: at})
	unique := &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
	first, skipped := insert(insertArgs{DeliveryID: 9}, unique)
	if skipped {
		t.Fatal("the first unique insert was skipped")
	}
	again, skipped := insert(insertArgs{DeliveryID: 9}, unique)
	if !skipped || again != first {
		t.Fatalf("the second unique insert: skipped %v, id %d; want skipped, id %d", skipped, again, first)
	}

	type row struct {
		Kind, Queue, State, Args, Metadata string
		Priority, MaxAttempts              int
		Tags                               []string `bun:",array"`
		ScheduledAt                        time.Time
		HasUniqueKey                       bool
	}
	read := func(id int64) row {
		t.Helper()
		var r row
		if err := d.Bun.NewRaw(`SELECT kind, queue, state, args::text AS args, metadata->'m' AS metadata, priority, max_attempts, tags, scheduled_at,
       unique_key IS NOT NULL AND unique_states IS NOT NULL AS has_unique_key FROM river_job WHERE id = ?`, id).Scan(ctx, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := read(plain); r.Kind != "insert_bench" || r.Queue != "q1" || r.State != "available" || r.Priority != 3 || r.MaxAttempts != 4 ||
		r.Args != `{"note": "quote \" backslash \\ brace } comma ,", "delivery_id": 7}` || r.Metadata != `[1, "x"]` ||
		len(r.Tags) != 2 || r.Tags[0] != "a-b" || r.Tags[1] != "c_d" || r.HasUniqueKey {
		t.Fatalf("the plain job reads back as %+v", r)
	}
	if r := read(later); r.State != "scheduled" || !r.ScheduledAt.Equal(at) {
		t.Fatalf("the scheduled job reads back as %+v; want scheduled at %s", r, at)
	}
	if r := read(first); !r.HasUniqueKey {
		t.Fatalf("the unique job has no unique key: %+v", r)
	}
}

// BenchmarkInsertTx measures what inserting one job in its own
// transaction costs the inserting process (the api stores every processor
// webhook with its job; the worker every outbound event): Go CPU per job
// beside the rate, one client, 2,000 jobs per iteration (make bench runs
// one).
func BenchmarkInsertTx(b *testing.B) {
	const jobs = 2000
	d := dbtest.New(b)
	ctx := context.Background()
	ins, err := queue.NewInserter(d.SQL, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	cpu := dbtest.CPU(b, d)
	self0, server0 := cpu()
	start := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N*jobs; i++ {
		err := db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
			_, err := ins.InsertTx(ctx, tx.Tx, insertArgs{DeliveryID: int64(i)}, nil)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	n := float64(b.N * jobs)
	self, server := cpu()
	b.ReportMetric(n/time.Since(start).Seconds(), "jobs/s")
	b.ReportMetric(float64((self-self0).Microseconds())/n, "go-cpu-µs/job")
	b.ReportMetric(float64((server-server0).Microseconds())/n, "pg-cpu-µs/job")
}
