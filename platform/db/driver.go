package db

import (
	"context"
	"database/sql/driver"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// simpleConnector is the database/sql connector of the pool with one
// change: a query without arguments is sent in PostgreSQL's simple
// protocol.
//
// bun writes every value into the SQL text, so its statements reach the
// driver without arguments and nearly every text is new. pgx already sends
// such a statement in the simple protocol when it returns no rows (one
// round trip); one that returns rows it would prepare as a named statement
// first (an extra round trip), keep in the connection's statement cache,
// and later evict with a DEALLOCATE: three messages for a text that is
// never seen again. Queries with arguments, the hot paths that send real
// parameters (Querier), keep the statement cache, where each shape is
// prepared once per connection.
//
// Measured on the withdrawal creation path (docs/performance.md).
type simpleConnector struct{ driver.Connector }

func (c simpleConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := dc.(*stdlib.Conn)
	if !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("db: unexpected driver connection %T", dc)
	}
	return simpleConn{sc}, nil
}

// simpleConn is a pgx connection whose argument-less queries use the
// simple protocol (simpleConnector). Every other method is pgx's own.
type simpleConn struct{ *stdlib.Conn }

var simpleProtocol = []driver.NamedValue{{Ordinal: 1, Value: pgx.QueryExecModeSimpleProtocol}}

func (c simpleConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) == 0 {
		args = simpleProtocol
	}
	return c.Conn.QueryContext(ctx, query, args)
}

// pgxConn returns the pgx connection under a database/sql driver
// connection of the pool (Open's, made by simpleConnector).
func pgxConn(dc any) (*pgx.Conn, error) {
	c, ok := dc.(simpleConn)
	if !ok {
		return nil, fmt.Errorf("db: a connection of db.Open's pool is needed, not %T", dc)
	}
	return c.Conn.Conn(), nil
}
