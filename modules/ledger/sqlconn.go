package ledger

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/uptrace/bun"
)

// querier is the database/sql side of a bun handle. The ledger sends its
// statements with real parameters ($1, $2, ...) instead of bun's
// interpolated literals: the driver then prepares each statement shape once
// per connection and reuses it, where an interpolated query is a new
// statement (an extra round trip) every time. The posting path is the
// service's hottest, so it is worth the difference.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func sqlOf(db bun.IDB) (querier, error) {
	switch v := db.(type) {
	case bun.Tx:
		return v.Tx, nil
	case *bun.Tx:
		return v.Tx, nil
	case *bun.DB:
		return v.DB, nil
	case bun.Conn:
		return v.Conn, nil
	case *bun.Conn:
		return v.Conn, nil
	}
	return nil, fmt.Errorf("ledger: unsupported database handle %T", db)
}
