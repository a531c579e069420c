package transfer_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/event"
	"svc/modules/ledger"
	"svc/platform/db"
)

// BenchmarkServerCPU: the database server's CPU per operation, one
// operation at a time, read from /proc for the server processes of the
// benchmark's own database (so only with the server on this machine):
// a transfer over HTTP (a new key: the fast way) and the parts of its
// transaction (docs/performance.md, "Transfers, escrow holds and the hot
// account"). Its postings are not transfers: the books are not checked.
//
//	go test -run '^$' -bench ServerCPU -benchtime 1500x ./modules/transfer/
func BenchmarkServerCPU(b *testing.B) {
	e := &env{Env: apptest.New(b), funded: map[string]int64{}}
	ctx := context.Background()
	const users = 100
	user := func(i int) ledger.Holder { return ledger.UserHolder(fmt.Sprint("u", i%users)) }
	for i := range users {
		e.fund(b, user(i).ID, asset.BTC, 1_000_000_000)
	}
	if _, err := serverCPU(e); err != nil {
		b.Skipf("server CPU not readable: %v", err)
	}
	for _, c := range []struct {
		name string
		op   func(i int) error
	}{
		{"http_transfer", func(i int) error {
			r := e.post(body{Legs: []leg{l(user(i).ID, user(i*7+3).ID, asset.BTC, 1)}})
			if r.Status != http.StatusCreated {
				return fmt.Errorf("%d %s", r.Status, r.Body)
			}
			return nil
		}},
		{"post_leg", func(i int) error {
			return db.RunInTx(ctx, e.App.DB.Bun, func(ctx context.Context, tx bun.Tx) error {
				_, err := ledger.PostTransferLeg(ctx, tx, asset.BTC, user(i), user(i*7+3), 1, uuid.NewString()+":0", "m")
				return err
			})
		}},
		{"lock_and_post_leg", func(i int) error {
			return db.RunInTx(ctx, e.App.DB.Bun, func(ctx context.Context, tx bun.Tx) error {
				from, to := user(i), user(i*7+3)
				if err := ledger.LockAccounts(ctx, tx, []ledger.AccountRef{{Asset: asset.BTC, Account: from.Available()}, {Asset: asset.BTC, Account: to.Available()}}); err != nil {
					return err
				}
				_, err := ledger.PostTransferLeg(ctx, tx, asset.BTC, from, to, 1, uuid.NewString()+":0", "m")
				return err
			})
		}},
		{"river_insert", func(int) error {
			return db.BatchTx(ctx, e.App.DB.Bun, func(ctx context.Context, tx *sql.Tx, _ db.SendBatch) error {
				_, err := e.App.Inserter.InsertTx(ctx, tx, event.DeliverArgs{EventID: uuid.New(), Attempt: 1}, nil)
				return err
			})
		}},
		{"empty_tx", func(int) error {
			return db.RunInTx(ctx, e.App.DB.Bun, func(ctx context.Context, tx bun.Tx) error {
				_, err := tx.ExecContext(ctx, "SELECT 1")
				return err
			})
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := range 50 { // warm the connections' prepared statements
				if err := c.op(i); err != nil {
					b.Fatal(err)
				}
			}
			before, _ := serverCPU(e)
			b.ResetTimer()
			for i := range b.N {
				if err := c.op(i); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			after, _ := serverCPU(e)
			b.ReportMetric(1000*(after-before)/float64(b.N), "server_cpu_ms/op")
		})
	}
}

// serverCPU is the CPU time, in seconds, of the server processes of the
// env's database.
func serverCPU(e *env) (float64, error) {
	var pids []int
	if err := e.App.DB.Bun.NewRaw("SELECT pid FROM pg_stat_activity WHERE datname = current_database()").Scan(context.Background(), &pids); err != nil {
		return 0, err
	}
	var sum float64
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, err
		}
		s := string(raw)
		f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
		user, _ := strconv.Atoi(f[11])
		sys, _ := strconv.Atoi(f[12])
		sum += float64(user+sys) / 100 // USER_HZ
	}
	return sum, nil
}
