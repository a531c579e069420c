package db

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/uptrace/bun"
)

// Querier is the database/sql side of a bun handle. Hot statements are sent
// through it with real parameters ($1, $2, ...) instead of bun's
// interpolated literals: the driver then prepares each statement shape once
// per connection and reuses it, where an interpolated query that returns
// rows is a new statement every time (an extra round trip to prepare it,
// and churn in the connection's statement cache).
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQLOf returns the database/sql handle under a bun handle: the same
// transaction when idb is one.
func SQLOf(idb bun.IDB) (Querier, error) {
	switch v := idb.(type) {
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
	return nil, fmt.Errorf("db: unsupported database handle %T", idb)
}
