// Package fsm is the state machine every resource moves along: a table of
// transitions (which trigger leads from which statuses to which status),
// its lookup, and the guarded UPDATE that writes a step only while the
// row still holds the status it was read in.
//
// A module keeps its statuses, its triggers and its rows; the mechanism is
// here, the same for deposits, withdrawals and whatever comes next.
package fsm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"svc/platform/db"
)

// Transition is one row of a table: Trigger fired from any of From leads
// to To. Event is what the row emits, the zero value when nothing (a
// table whose rows emit nothing uses NoEvent).
type Transition[S, T comparable, E any] struct {
	From    []S
	Trigger T
	To      S
	Event   E
}

// NoEvent is the event type of a table whose rows emit nothing.
type NoEvent struct{}

// Machine is a resource's transition table and where its rows are stored.
type Machine[S ~string, T comparable, E any] struct {
	// Table is the resource's SQL table; its rows have the columns id,
	// status and updated_at.
	Table string
	// Noun names one row in errors ("deposit").
	Noun string
	// Rows is the table, the only place that says which status may
	// follow which.
	Rows []Transition[S, T, E]
	// Refuse is the error for a trigger that no row fires from a status;
	// nil: an error matching ErrNoTransition.
	Refuse func(from S, t T) error
	// MovedOn is the error for a guarded update that found the row no
	// longer in the status it was read in, given what happened ("deposit
	// <id> is no longer pending"); nil: an error matching ErrMovedOn.
	MovedOn func(msg string) error
}

// Transitions returns a copy of the rows (for documentation and tests).
func (m *Machine[S, T, E]) Transitions() []Transition[S, T, E] {
	return append([]Transition[S, T, E](nil), m.Rows...)
}

// Next returns the row that trigger t fires from status from, or
// m.Refuse's error when there is none.
func (m *Machine[S, T, E]) Next(from S, t T) (Transition[S, T, E], error) {
	for _, tr := range m.Rows {
		if tr.Trigger == t && slices.Contains(tr.From, from) {
			return tr, nil
		}
	}
	if m.Refuse == nil {
		return Transition[S, T, E]{}, fmt.Errorf("%w: %v from %v", ErrNoTransition, t, from)
	}
	return Transition[S, T, E]{}, m.Refuse(from, t)
}

// The errors of a Machine without its own Refuse and MovedOn.
var (
	// ErrNoTransition: no row of the table fires the trigger from the status.
	ErrNoTransition = errors.New("no transition")
	// ErrMovedOn: a guarded update found the row no longer in the status
	// the caller read (or its extra guard no longer holds).
	ErrMovedOn = errors.New("the row moved on")
)

// Step is the write of one transition of one row.
type Step[S ~string] struct {
	ID       any       // the row's id
	From, To S         // the status the caller read, and the next one
	At       time.Time // updated_at, and $2 for the expressions of Exprs
	// Exprs are further assignments written as SQL, which may use $2 (At),
	// as "closed_at = COALESCE(closed_at, $2)".
	Exprs []string
	// Set are further columns set to values, written in name order: one
	// statement text per set of columns.
	Set map[string]any
	// Guard, when not empty, is a column that must still hold GuardValue.
	Guard      string
	GuardValue any
	// Unchanged are further columns that must still hold the values the
	// caller read (compared with IS NOT DISTINCT FROM, so that a NULL
	// read guards too), in name order: an optimistic lock on the row as
	// read, in place of a transaction that locks it first.
	Unchanged map[string]any
	// Conds are further conditions written as SQL, which may use $2 (At);
	// a step that Stays has none.
	Conds []string
	// Into, when not nil, is the bun model the updated row is read back
	// into (RETURNING its columns).
	Into any
	// Stays, with To equal to From, writes a change of other columns under
	// the status guard: status and updated_at are left as they are, there
	// are no Exprs (no $2), and nothing is written when nothing is set.
	// Without it a step to the same status is written as any other
	// (updated_at moves).
	Stays bool
	// With are data-modifying queries written in the same statement, as
	// its WITH queries (the events a step emits, rows of other tables the
	// same change writes): each is given the number of its first
	// parameter and returns its text and arguments. They run whether or
	// not the row moved on; the caller's transaction rolls them back with
	// the MovedOn error.
	With []With
}

// With is a data-modifying WITH query of a Step: its SQL with its
// parameters numbered from first, and their arguments.
type With func(first int) (query string, args []any)

// Apply writes st on idb (a transaction that holds the row's lock, or any
// handle when the guards say enough) in one statement with real
// parameters:
//
//	[WITH w0 AS (...), ...] UPDATE <table> SET status = $1, updated_at = $2[, exprs][, set] WHERE id = $i AND status = $j[ AND guard = $k][ AND col IS NOT DISTINCT FROM $n ...][ AND (cond) ...][ RETURNING ...]
//
// A step that Stays leaves status and updated_at as they are (see Stays).
//
// The update applies only while the row is still in st.From (and the
// guard holds), so that a concurrent change that slipped past the lock
// fails loudly instead of being overwritten (see MovedOn).
func (m *Machine[S, T, E]) Apply(ctx context.Context, idb bun.IDB, st Step[S]) error {
	var (
		b    strings.Builder
		args []any
		sep  = ", "
	)
	if st.Stays {
		// Exprs and Conds may use $2 (At), which a step that stays does
		// not send.
		if st.To != st.From || len(st.Exprs) > 0 || len(st.Conds) > 0 {
			return fmt.Errorf("%s %v: a step that stays in %s goes to no other status and has no expressions or conditions", m.Noun, st.ID, st.From)
		}
		if len(st.Set) == 0 && len(st.With) == 0 {
			return nil
		}
		b.WriteString("UPDATE " + m.Table + " SET ")
		sep = ""
	} else {
		args = []any{string(st.To), st.At}
		b.WriteString("UPDATE " + m.Table + " SET status = $1, updated_at = $2")
		for _, e := range st.Exprs {
			b.WriteString(", " + e)
		}
	}
	for _, col := range slices.Sorted(maps.Keys(st.Set)) {
		args = append(args, st.Set[col])
		fmt.Fprintf(&b, "%s%s = $%d", sep, pgx.Identifier{col}.Sanitize(), len(args))
		sep = ", "
	}
	if sep == "" { // stays, sets nothing: the status alone, for the guard and the WITH queries
		args = append(args, string(st.From))
		fmt.Fprintf(&b, "status = $%d", len(args))
	}
	args = append(args, st.ID, string(st.From))
	fmt.Fprintf(&b, " WHERE id = $%d AND status = $%d", len(args)-1, len(args))
	if st.Guard != "" {
		args = append(args, st.GuardValue)
		fmt.Fprintf(&b, " AND %s = $%d", pgx.Identifier{st.Guard}.Sanitize(), len(args))
	}
	for _, col := range slices.Sorted(maps.Keys(st.Unchanged)) {
		args = append(args, st.Unchanged[col])
		fmt.Fprintf(&b, " AND %s IS NOT DISTINCT FROM $%d", pgx.Identifier{col}.Sanitize(), len(args))
	}
	for _, c := range st.Conds {
		b.WriteString(" AND (" + c + ")")
	}
	if st.Into != nil {
		b.WriteString(" RETURNING " + db.Columns(idb, st.Into))
	}
	stmt := b.String()
	if len(st.With) > 0 {
		var w strings.Builder
		for i, with := range st.With {
			q, a := with(len(args) + 1)
			args = append(args, a...)
			if i == 0 {
				w.WriteString("WITH ")
			} else {
				w.WriteString(", ")
			}
			fmt.Fprintf(&w, "w%d AS (%s)", i, q)
		}
		stmt = w.String() + "\n" + stmt
	}
	moved := false
	var err error
	if st.Into != nil {
		err = db.QueryModel(ctx, idb, st.Into, stmt, args...)
		moved = db.IsNoRows(err)
	} else {
		res, xerr := db.Exec(ctx, idb, stmt, args...)
		err = xerr
		if err == nil {
			n, _ := res.RowsAffected()
			moved = n != 1
		}
	}
	if moved {
		msg := fmt.Sprintf("%s %v is no longer %s", m.Noun, st.ID, st.From)
		if m.MovedOn == nil {
			return fmt.Errorf("%w: %s", ErrMovedOn, msg)
		}
		return m.MovedOn(msg)
	}
	if err != nil {
		return fmt.Errorf("%s %v: %s -> %s: %w", m.Noun, st.ID, st.From, st.To, err)
	}
	return nil
}
