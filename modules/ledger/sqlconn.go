package ledger

import (
	"github.com/uptrace/bun"

	"svc/platform/db"
)

// sqlOf returns the database/sql handle the ledger sends its statements
// through, with real parameters: the posting path is the service's hottest
// (see db.Querier).
func sqlOf(idb bun.IDB) (db.Querier, error) { return db.SQLOf(idb) }
