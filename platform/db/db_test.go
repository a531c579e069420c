package db_test

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"svc/platform/db"
)

func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("post: %w", &pgconn.PgError{Code: "53100"}), true}, // disk full
		{&pgconn.PgError{Code: "53300"}, true},                         // too many connections
		{&pgconn.PgError{Code: "25006"}, true},                         // read-only transaction
		{&pgconn.PgError{Code: "57P01"}, true},                         // a connection loss too
		{&pgconn.PgError{Code: "23505"}, false},
		{errors.New("something else"), false},
	} {
		require.Equal(t, tc.want, db.IsUnavailable(tc.err), "%v", tc.err)
	}
}

func TestIsConnectionLoss(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("look up API key: %w", &pgconn.PgError{Code: "57P01"}), true},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "23505"}, false},
		{fmt.Errorf("x: %w", driver.ErrBadConn), true},
		{errors.New("failed to receive message: unexpected EOF"), true},
		{fmt.Errorf("look up API key: %w", io.ErrUnexpectedEOF), true}, // pgx, the server gone mid-message
		{io.EOF, false},
		{errors.New("something else"), false},
		{nil, false},
	} {
		require.Equal(t, tc.want, db.IsConnectionLoss(tc.err), "%v", tc.err)
	}
}
