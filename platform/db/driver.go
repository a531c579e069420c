package db

import (
	"context"
	"database/sql/driver"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"
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
// simple protocol (simpleConnector), and which sends lib/pq's arrays and
// uuids as their text (textParams). Every other method is pgx's own.
type simpleConn struct{ *stdlib.Conn }

var simpleProtocol = []driver.NamedValue{{Ordinal: 1, Value: pgx.QueryExecModeSimpleProtocol}}

func (c simpleConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) == 0 {
		args = simpleProtocol
	}
	args, err := textParams(args)
	if err != nil {
		return nil, err
	}
	return c.Conn.QueryContext(ctx, query, args)
}

func (c simpleConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	args, err := textParams(args)
	if err != nil {
		return nil, err
	}
	return c.Conn.ExecContext(ctx, query, args)
}

// textParams replaces every lib/pq array among args by its value: the
// array's text form (or nil for NULL), which pgx sends as a text parameter
// as it stands; and every uuid.UUID by its text, for the same reason (pgx
// otherwise takes it through its Valuer, plans anew how to encode the
// string as a uuid, and parses it: every id of every hot statement).
//
// River's database/sql driver, through which every job is inserted inside
// the service's transactions (queue.NewInserter), passes each column of
// its batch insert as a lib/pq array: thirteen per job. Handed the
// driver.Valuer, pgx asks for its value, a string, and then, the
// parameter's type being an array it encodes in binary, parses that string
// back into Go values, trying and failing plans on the way, to encode them
// again: a profile of the api under load put 14% of its CPU there, storing
// processor webhooks with their jobs (docs/performance.md). The text form
// is exactly what lib/pq itself sends and what PostgreSQL parses.
func textParams(args []driver.NamedValue) ([]driver.NamedValue, error) {
	var out []driver.NamedValue
	for i, a := range args {
		var v driver.Value
		switch x := a.Value.(type) {
		case uuid.UUID:
			v = x.String()
		default:
			if !isPQArray(x) {
				continue
			}
			var err error
			if v, err = x.(driver.Valuer).Value(); err != nil {
				return nil, err
			}
		}
		if out == nil {
			out = append([]driver.NamedValue(nil), args...)
		}
		out[i].Value = v
	}
	if out == nil {
		return args, nil
	}
	return out, nil
}

// isPQArray reports whether v is one of the arrays pq.Array makes.
func isPQArray(v any) bool {
	switch v.(type) {
	case pq.GenericArray, *pq.BoolArray, *pq.ByteaArray, *pq.Float32Array, *pq.Float64Array, *pq.Int32Array, *pq.Int64Array, *pq.StringArray:
		return true
	}
	return false
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
