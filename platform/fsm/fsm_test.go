package fsm_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/dbtest"
	"svc/platform/fsm"
)

type status string

type trigger string

const (
	open   status = "open"
	held   status = "held"
	done   status = "done"
	closed status = "closed"

	hold    trigger = "hold"
	finish  trigger = "finish"
	cancel  trigger = "cancel"
	unknown trigger = "unknown"
)

var errIllegal = errors.New("illegal")

// newMachine is a small table of the shape the modules use: one trigger from
// several statuses, one status reached by several triggers.
func newMachine() *fsm.Machine[status, trigger, string] {
	return &fsm.Machine[status, trigger, string]{
		Table: "fsm_items",
		Noun:  "item",
		Rows: []fsm.Transition[status, trigger, string]{
			{From: []status{open}, Trigger: hold, To: held},
			{From: []status{open, held}, Trigger: finish, To: done, Event: "item.done"},
			{From: []status{open, held}, Trigger: cancel, To: closed},
		},
		Refuse: func(from status, t trigger) error {
			return errors.Join(errIllegal, errors.New(string(t)+" from "+string(from)))
		},
		MovedOn: func(msg string) error { return errors.Join(errIllegal, errors.New(msg)) },
	}
}

// Next finds the row that a trigger fires from a status, and refuses a
// trigger that no row fires from it.
func TestNext(t *testing.T) {
	t.Parallel()
	m := newMachine()
	for _, tt := range []struct {
		from  status
		t     trigger
		to    status // "": refused
		event string
	}{
		{open, hold, held, ""},
		{open, finish, done, "item.done"},
		{held, finish, done, "item.done"},
		{held, cancel, closed, ""},
		{held, hold, "", ""},   // the trigger exists, not from this status
		{done, finish, "", ""}, // a terminal status
		{open, unknown, "", ""},
	} {
		tr, err := m.Next(tt.from, tt.t)
		if tt.to == "" {
			require.ErrorIs(t, err, errIllegal, "%s --%s-->", tt.from, tt.t)
			require.ErrorContains(t, err, string(tt.t)+" from "+string(tt.from))
			require.Zero(t, tr.To)
			continue
		}
		require.NoError(t, err, "%s --%s-->", tt.from, tt.t)
		require.Equal(t, tt.to, tr.To)
		require.Equal(t, tt.t, tr.Trigger)
		require.Equal(t, tt.event, tr.Event)
	}
	// Without a Refuse of its own, the machine's error.
	m.Refuse = nil
	_, err := m.Next(done, finish)
	require.ErrorIs(t, err, fsm.ErrNoTransition)
}

func TestTransitionsIsACopy(t *testing.T) {
	t.Parallel()
	m := newMachine()
	rows := m.Transitions()
	require.Len(t, rows, 3)
	rows[0].To = closed
	tr, err := m.Next(open, hold)
	require.NoError(t, err)
	require.Equal(t, held, tr.To)
}

type item struct {
	bun.BaseModel `bun:"table:fsm_items"`
	ID            uuid.UUID  `bun:"id,pk,type:uuid"`
	Status        status     `bun:"status"`
	UpdatedAt     time.Time  `bun:"updated_at"`
	ClosedAt      *time.Time `bun:"closed_at"`
	Note          string     `bun:"note"`
	Attempt       int        `bun:"attempt"`
}

// itemsDB returns a fresh database with a table of items (as its owner:
// the table is the test's own).
func itemsDB(t *testing.T) *db.DB {
	t.Helper()
	d, err := db.Open(context.Background(), dbtest.OwnerURL(dbtest.NewURL(t)), 2)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	_, err = d.Pool.Exec(context.Background(), `CREATE TABLE fsm_items (
		id uuid PRIMARY KEY, status text NOT NULL, updated_at timestamptz NOT NULL,
		closed_at timestamptz, note text NOT NULL DEFAULT '', attempt int NOT NULL DEFAULT 0)`)
	require.NoError(t, err)
	return d
}

func insert(t *testing.T, d *db.DB, s status) uuid.UUID {
	t.Helper()
	id := uuid.New()
	_, err := d.Pool.Exec(context.Background(), "INSERT INTO fsm_items (id, status, updated_at) VALUES ($1, $2, now())", id, string(s))
	require.NoError(t, err)
	return id
}

func read(t *testing.T, d *db.DB, id uuid.UUID) item {
	t.Helper()
	var it item
	require.NoError(t, d.Bun.NewSelect().Model(&it).Where("id = ?", id).Scan(context.Background()))
	return it
}

func TestApplyWritesTheStep(t *testing.T) {
	t.Parallel()
	d, m, ctx := itemsDB(t), newMachine(), context.Background()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	// Without Into: expressions over $2, columns in name order.
	id := insert(t, d, open)
	require.NoError(t, m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: open, To: held, At: at,
		Exprs: []string{"closed_at = COALESCE(closed_at, $2)"}, Set: map[string]any{"note": "n", "attempt": 2}}))
	got := read(t, d, id)
	require.Equal(t, held, got.Status)
	require.True(t, got.UpdatedAt.Equal(at))
	require.NotNil(t, got.ClosedAt)
	require.True(t, got.ClosedAt.Equal(at))
	require.Equal(t, "n", got.Note)
	require.Equal(t, 2, got.Attempt)

	// With Into, in a transaction: the written row is read back, and a
	// guard that holds lets it through.
	var back item
	require.NoError(t, db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
		return m.Apply(ctx, tx, fsm.Step[status]{ID: id, From: held, To: done, At: at.Add(time.Minute),
			Set: map[string]any{"attempt": 3}, Guard: "note", GuardValue: "n", Into: &back})
	}))
	require.Equal(t, id, back.ID)
	require.Equal(t, done, back.Status)
	require.Equal(t, 3, back.Attempt)
	require.Equal(t, "n", back.Note)
	require.True(t, back.UpdatedAt.Equal(at.Add(time.Minute)))
}

// The update applies only while the row is in the status the caller
// read, and its guard holds: a row that moved on is refused and left as
// it is.
func TestApplyRefusesARowThatMovedOn(t *testing.T) {
	t.Parallel()
	d, m, ctx := itemsDB(t), newMachine(), context.Background()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	id := insert(t, d, open)
	before := read(t, d, id)

	// Another writer holds it first.
	require.NoError(t, m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: open, To: held, At: at}))
	held1 := read(t, d, id)

	// This caller read it open: without Into, and with Into.
	err := m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: open, To: closed, At: at.Add(time.Hour),
		Set: map[string]any{"note": "late"}})
	require.ErrorIs(t, err, errIllegal)
	require.ErrorContains(t, err, "item "+id.String()+" is no longer open")
	var back item
	err = m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: open, To: closed, At: at.Add(time.Hour), Into: &back})
	require.ErrorIs(t, err, errIllegal)
	require.Zero(t, back.ID, "nothing read back")

	// The status holds, the guard does not.
	err = m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: held, To: done, At: at.Add(time.Hour),
		Guard: "note", GuardValue: "someone else's", Into: &back})
	require.ErrorIs(t, err, errIllegal)

	// Without a MovedOn of its own, the machine's error.
	m.MovedOn = nil
	err = m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: open, To: closed, At: at.Add(time.Hour)})
	require.ErrorIs(t, err, fsm.ErrMovedOn)

	after := read(t, d, id)
	require.Equal(t, held1, after, "the refused steps wrote nothing")
	require.NotEqual(t, before.Status, after.Status)
	require.Equal(t, held, after.Status)
}

// A failure of the statement itself is not a moved row: it says which
// step failed.
func TestApplyReportsAFailedStatement(t *testing.T) {
	t.Parallel()
	d, m, ctx := itemsDB(t), newMachine(), context.Background()
	id := insert(t, d, open)
	err := m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: open, To: held, At: time.Now(),
		Set: map[string]any{"no_such_column": 1}})
	require.Error(t, err)
	require.NotErrorIs(t, err, errIllegal)
	require.ErrorContains(t, err, "item "+id.String()+": open -> held")
}

// Unchanged and Conds guard the update as well: it applies only while
// every column still holds what the caller read (a NULL included) and
// every condition holds; otherwise the row is refused as moved on.
func TestApplyGuardsOnTheRowAsRead(t *testing.T) {
	t.Parallel()
	d, m, ctx := itemsDB(t), newMachine(), context.Background()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	id := insert(t, d, open)
	read0 := read(t, d, id) // closed_at NULL, attempt 0

	// Another writer moves a guarded column without changing the status.
	_, err := d.Pool.Exec(ctx, "UPDATE fsm_items SET attempt = 1 WHERE id = $1", id)
	require.NoError(t, err)
	err = m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: open, To: held, At: at,
		Unchanged: map[string]any{"attempt": read0.Attempt, "closed_at": read0.ClosedAt}})
	require.ErrorIs(t, err, errIllegal)
	require.Equal(t, open, read(t, d, id).Status)

	// A condition that does not hold refuses it too.
	err = m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: open, To: held, At: at,
		Unchanged: map[string]any{"attempt": 1, "closed_at": nil}, Conds: []string{"note <> ''"}})
	require.ErrorIs(t, err, errIllegal)
	require.Equal(t, open, read(t, d, id).Status)

	// The row as read, NULL included, and the conditions holding: applied.
	var back item
	require.NoError(t, m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: open, To: held, At: at,
		Set: map[string]any{"attempt": 2}, Unchanged: map[string]any{"attempt": 1, "closed_at": nil},
		Conds: []string{"note = ''", "updated_at <> $2"}, Into: &back}))
	require.Equal(t, held, back.Status)
	require.Equal(t, 2, back.Attempt)
}

// A step's WITH queries are written in its statement, numbered after the
// step's own parameters; a step that stays sets its columns under the
// status guard and leaves status and updated_at; a row that moved on
// takes none of it (the caller's transaction rolls the WITH queries back).
func TestApplyWithQueriesAndStays(t *testing.T) {
	t.Parallel()
	d, m, ctx := itemsDB(t), newMachine(), context.Background()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	_, err := d.Pool.Exec(ctx, "CREATE TABLE fsm_log (item uuid NOT NULL, what text NOT NULL)")
	require.NoError(t, err)
	logged := func(id uuid.UUID) []string {
		var out []string
		require.NoError(t, d.Bun.NewRaw("SELECT what FROM fsm_log WHERE item = ? ORDER BY what", id).Scan(ctx, &out))
		return out
	}
	logRow := func(id uuid.UUID, what string) fsm.With {
		return func(first int) (string, []any) {
			return fmt.Sprintf("INSERT INTO fsm_log (item, what) VALUES ($%d::uuid, $%d::text)", first, first+1), []any{id, what}
		}
	}

	id := insert(t, d, open)
	require.NoError(t, m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: open, To: held, At: at,
		Exprs: []string{"closed_at = COALESCE(closed_at, $2)"}, Set: map[string]any{"note": "n"},
		With: []fsm.With{logRow(id, "a"), logRow(id, "b")}}))
	got := read(t, d, id)
	require.Equal(t, held, got.Status)
	require.Equal(t, "n", got.Note)
	require.Equal(t, []string{"a", "b"}, logged(id))

	// Stays: the columns and the WITH query, not status or updated_at.
	require.NoError(t, m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: held, To: held, Stays: true, At: at.Add(time.Hour),
		Set: map[string]any{"attempt": 7}, With: []fsm.With{logRow(id, "c")}}))
	stayed := read(t, d, id)
	require.Equal(t, held, stayed.Status)
	require.Equal(t, 7, stayed.Attempt)
	require.True(t, stayed.UpdatedAt.Equal(got.UpdatedAt), "updated_at left")
	require.Equal(t, []string{"a", "b", "c"}, logged(id))
	// Stays and sets nothing but a WITH query: written, under the guard.
	require.NoError(t, m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: held, To: held, Stays: true, With: []fsm.With{logRow(id, "d")}}))
	require.Equal(t, []string{"a", "b", "c", "d"}, logged(id))
	// Stays with nothing to write: no statement.
	require.NoError(t, m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: held, To: held, Stays: true}))
	// A stay has no expressions, and goes nowhere else.
	require.Error(t, m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: held, To: held, Stays: true, Exprs: []string{"closed_at = $2"}}))
	require.Error(t, m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: held, To: done, Stays: true}))
	// Without Stays, a step to the same status moves updated_at.
	require.NoError(t, m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: held, To: held, At: at.Add(2 * time.Hour)}))
	require.True(t, read(t, d, id).UpdatedAt.Equal(at.Add(2*time.Hour)))

	// Moved on, in a transaction: refused, and the WITH query goes with it.
	err = db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
		return m.Apply(ctx, tx, fsm.Step[status]{ID: id, From: open, To: closed, At: at, With: []fsm.With{logRow(id, "e")}})
	})
	require.ErrorIs(t, err, errIllegal)
	err = db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
		return m.Apply(ctx, tx, fsm.Step[status]{ID: id, From: open, To: open, Stays: true, Set: map[string]any{"note": "x"}, With: []fsm.With{logRow(id, "f")}})
	})
	require.ErrorIs(t, err, errIllegal)
	require.Equal(t, []string{"a", "b", "c", "d"}, logged(id))
	require.Equal(t, "n", read(t, d, id).Note)
}

// Conds may use $2 (At), which a step that Stays does not send (its
// parameters start with its Set): such a step with conditions is refused
// before anything is written, where $2 would have been its second Set
// column (here closed_at's value), silently.
func TestApplyStaysCondsSeeAt(t *testing.T) {
	t.Parallel()
	d, m, ctx := itemsDB(t), newMachine(), context.Background()
	id := insert(t, d, open)
	at := read(t, d, id).UpdatedAt
	err := m.Apply(ctx, d.Bun, fsm.Step[status]{ID: id, From: open, To: open, Stays: true, At: at,
		Set:   map[string]any{"attempt": 7, "closed_at": at.Add(time.Hour)},
		Conds: []string{"updated_at <> $2"}})
	require.ErrorContains(t, err, "no expressions or conditions")
	require.Equal(t, 0, read(t, d, id).Attempt, "nothing written")
}
